// Op libraries in this process: dlopen before a package loads (its torchbind
// constants and custom ops must be registered first), and what is mapped. Pairs with
// python/aoti_deploy/ops/loader.py.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace aoti_runner {

// An op library to load: a file, or a verified bundle's sealed copy of one.
struct OpLibraryFile {
  std::string path;    // what is read and dlopen'ed: a file, or /proc/self/fd/N of a sealed copy
  std::string name;    // its file name (the spec's namespaces and the checks below go by it)
  std::string shown;   // how messages and the runners' output name it
  std::string sha256;  // hex, when already known (hashed as it was sealed); empty: hashed here
};

// Op library files named by path (the user's, or a bare bundle's).
std::vector<OpLibraryFile> op_library_files(const std::vector<std::string>& paths);

// The op libraries a package records, found as every command finds the build (as
// python/aoti_deploy/locate.py): the project's library (libidentity_conv_ops.so) at
// $AOTI_DEPLOY_OPS_LIB; each recorded library in $AOTI_DEPLOY_BUILD_DIR; else in
// `runner_dir`, the folder of the running aoti_runner (the build folder). For a runner
// given no library. A variable that names no file is an error; a library found nowhere
// is left out (the package's check of its ops then names it).
std::vector<OpLibraryFile> find_recorded_op_libraries(const std::vector<std::string>& recorded,
                                                      const std::string& runner_dir);

// dlopen(RTLD_NOW | RTLD_GLOBAL) each library, in order; registration runs here.
// A process may load several packages (a Triton server does), each with its own copy of
// a library. A library with the same bytes (SHA-256) as one already loaded is not
// loaded again: its ops are registered. One that could register a namespace a second
// time is refused before dlopen, because torch aborts the process (in a static
// initializer, which nothing can catch) on a second TORCH_LIBRARY block for a namespace:
// a library with the same file name as a loaded one but other bytes, or one whose
// namespaces (the spec's op_library_namespaces, by file name: the namespaces the
// package calls) a loaded library or the dispatcher already has. A library of another
// name that registers an unrecorded namespace twice is beyond what can be seen here.
// A sealed copy is dlopen'ed through a duplicate of its descriptor that stays open for
// the life of the process: glibc knows a library by the name it was opened with, so that
// /proc/self/fd/N name must never be reused by another file.
void load_op_libraries(const std::vector<OpLibraryFile>& libraries,
                       const std::map<std::string, std::vector<std::string>>& namespaces = {});

// Shared objects mapped into this process, from /proc/self/maps.
std::vector<std::string> loaded_shared_objects();

}  // namespace aoti_runner
