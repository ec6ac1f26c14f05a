// Op libraries in this process: dlopen before a package loads (its torchbind
// constants and custom ops must be registered first), and what is mapped. Pairs with
// python/identity_conv/ops/loader.py.
#pragma once

#include <string>
#include <vector>

namespace aoti_runner {

// dlopen(RTLD_NOW | RTLD_GLOBAL) each library, in order; registration runs here.
void load_op_libraries(const std::vector<std::string>& paths);

// Shared objects mapped into this process, from /proc/self/maps.
std::vector<std::string> loaded_shared_objects();

}  // namespace aoti_runner
