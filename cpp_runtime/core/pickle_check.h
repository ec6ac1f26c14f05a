// A pickle's declared lengths and memo ids, checked before libtorch's unpickler reads
// it: the unpickler allocates a string or bytes of the length an opcode declares before
// it reads them, so a 1 KB tensor file declaring 4 GB made it allocate 4 GB, and it
// grows its memo to any id a PUT names (both found by cpp_runtime/fuzz/fuzz_tensor_file).
#pragma once

#include <cstddef>
#include <string>

namespace aoti_runner {

// Walks the opcodes of a pickle of `size` bytes and returns why one declares more
// bytes than the pickle holds after it or stores a memo id past the next one, or ""
// when none does. It stops at the first opcode it does not know (libtorch's unpickler
// refuses those itself).
std::string pickle_problem(const char* data, size_t size);

}  // namespace aoti_runner
