#include "op_libraries.h"

#include "errors.h"

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace aoti_runner {
void load_op_libraries(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    // The same words as python/identity_conv/ops/loader.py.
    if (!std::filesystem::exists(path)) {
      throw RunnerError("op library not found: " + path +
                        ". Build it (./scripts/setup.sh builds this project's libraries into "
                        "build/), or correct the path.");
    }
    // An absolute path: dlopen of a bare name would search the library path instead of
    // the file checked above. RTLD_GLOBAL: the package resolves the library's symbols.
    const auto absolute = std::filesystem::absolute(path).string();
    if (dlopen(absolute.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      throw RunnerError("could not load op library " + path + ": " +
                        (error ? error : "unknown dlopen error") +
                        ". Pass a shared library built against this torch (./scripts/setup.sh "
                        "builds this project's).");
    }
  }
}

std::vector<std::string> loaded_shared_objects() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> seen;
  std::vector<std::string> objects;
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) {
      continue;
    }
    const auto path = line.substr(slash);
    if (path.find(".so") != std::string::npos && seen.insert(path).second) {
      objects.push_back(path);
    }
  }
  return objects;
}

}  // namespace aoti_runner
