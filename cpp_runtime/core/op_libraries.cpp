#include "op_libraries.h"

#include "digest.h"
#include "errors.h"
#include "shared_object.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

namespace aoti_runner {
namespace {

struct LoadedLibrary {
  std::string path;
  std::string name;  // file name
  std::string digest;
  std::vector<std::string> namespaces;  // empty: not known
};

// Every library this process loaded through load_op_libraries.
std::mutex g_loaded_mutex;
std::vector<LoadedLibrary> g_loaded;


// Why loading `candidate` could register a namespace twice, or "": a library loaded
// earlier with the same file name but other bytes (a rebuild registers the same
// namespaces), one whose recorded namespaces overlap, or ops of a recorded namespace
// already in the dispatcher from a library this process did not load through here.
std::string conflict(const LoadedLibrary& candidate) {
  for (const auto& loaded : g_loaded) {
    if (loaded.name == candidate.name) {
      return loaded.path + ", loaded earlier, has the same name and other bytes";
    }
    for (const auto& space : candidate.namespaces) {
      if (std::find(loaded.namespaces.begin(), loaded.namespaces.end(), space) != loaded.namespaces.end()) {
        return loaded.path + ", loaded earlier, registers namespace " + space + " too";
      }
    }
  }
  if (!candidate.namespaces.empty()) {
    for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) {
      for (const auto& space : candidate.namespaces) {
        if (op.name.rfind(space + "::", 0) == 0) {
          return "namespace " + space + " is already registered in this process (" + op.name + ")";
        }
      }
    }
  }
  return "";
}

}  // namespace

std::vector<OpLibraryFile> op_library_files(const std::vector<std::string>& paths) {
  std::vector<OpLibraryFile> files;
  for (const auto& path : paths) {
    files.push_back({path, std::filesystem::path(path).filename().string(), path, ""});
  }
  return files;
}

std::vector<OpLibraryFile> find_recorded_op_libraries(const std::vector<std::string>& recorded,
                                                      const std::string& runner_dir) {
  static const std::string kProjectLibrary = "libidentity_conv_ops.so";
  const char* library_env = std::getenv("AOTI_DEPLOY_OPS_LIB");
  const char* build_env = std::getenv("AOTI_DEPLOY_BUILD_DIR");
  std::error_code ec;
  if (library_env != nullptr && *library_env != '\0' && !std::filesystem::is_regular_file(library_env, ec)) {
    throw RunnerError(std::string("AOTI_DEPLOY_OPS_LIB is set to ") + library_env +
                      ", which does not exist. Point it at " + kProjectLibrary +
                      ", or unset it to use the build folder.");
  }
  if (build_env != nullptr && *build_env != '\0' && !std::filesystem::is_directory(build_env, ec)) {
    throw RunnerError(std::string("AOTI_DEPLOY_BUILD_DIR is set to ") + build_env +
                      ", which is not a folder. Point it at the build folder, or unset it.");
  }
  std::vector<OpLibraryFile> found;
  for (const auto& name : recorded) {
    std::filesystem::path path;
    if (name == kProjectLibrary && library_env != nullptr && *library_env != '\0') {
      path = library_env;
    } else if (build_env != nullptr && *build_env != '\0') {
      path = std::filesystem::path(build_env) / name;
    } else {
      path = std::filesystem::path(runner_dir) / name;
    }
    if (std::filesystem::is_regular_file(path, ec)) {
      found.push_back({path.string(), name, path.string(), ""});
    }
  }
  return found;
}

void load_op_libraries(const std::vector<OpLibraryFile>& libraries,
                       const std::map<std::string, std::vector<std::string>>& namespaces) {
  std::lock_guard<std::mutex> lock(g_loaded_mutex);
  for (const auto& library : libraries) {
    const auto& path = library.shown;
    // The same words as python/aoti_deploy/ops/loader.py.
    if (!std::filesystem::exists(library.path)) {
      throw RunnerError("op library not found: " + path +
                        ". Build it (./scripts/setup.sh builds this project's libraries into "
                        "build/), or correct the path.");
    }
    // An absolute path: dlopen of a bare name would search the library path instead of
    // the file checked above. RTLD_GLOBAL: the package resolves the library's symbols.
    auto absolute = std::filesystem::absolute(library.path).string();
    // A truncated or foreign file would crash the dynamic loader (SIGBUS), not fail it.
    check_shared_object_file(absolute, "op library " + path,
                             "Rebuild it (./scripts/setup.sh builds this project's libraries into build/), or "
                             "correct the path.");
    LoadedLibrary candidate{absolute, library.name,
                            library.sha256.empty() ? to_hex(sha256_file(absolute, "op library")) : library.sha256,
                            {}};
    if (const auto it = namespaces.find(candidate.name); it != namespaces.end()) {
      candidate.namespaces = it->second;
    }
    const bool already = std::any_of(g_loaded.begin(), g_loaded.end(),
                                     [&](const LoadedLibrary& loaded) { return loaded.digest == candidate.digest; });
    if (already) {
      continue;
    }
    if (const auto why = conflict(candidate); !why.empty()) {
      throw RunnerError("op library " + path + " cannot be loaded into this process: " + why +
                        ", and torch aborts the process on a second registration of a namespace. Serve "
                        "packages built against the same op library in one process (rebuild the bundles "
                        "with it), or serve them from separate processes.");
    }
    constexpr const char* kDescriptors = "/proc/self/fd/";
    int kept = -1;
    if (absolute.rfind(kDescriptors, 0) == 0) {
      candidate.path = path;  // a sealed copy: named as shown, not by its descriptor
      // Never closed (see load_op_libraries in the header); the library stays mapped for
      // the life of the process anyway.
      kept = fcntl(std::stoi(absolute.substr(std::strlen(kDescriptors))), F_DUPFD_CLOEXEC, 0);
      if (kept < 0) {
        throw RunnerError("could not keep the sealed copy of op library " + path + " open: " + std::strerror(errno));
      }
      absolute = kDescriptors + std::to_string(kept);
    }
    if (dlopen(absolute.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      if (kept >= 0) close(kept);
      throw RunnerError("could not load op library " + path + ": " +
                        (error ? error : "unknown dlopen error") +
                        ". Pass a shared library built against this torch (./scripts/setup.sh "
                        "builds this project's).");
    }
    g_loaded.push_back(std::move(candidate));
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
