#include "preflight.h"

#include "errors.h"
#include "text.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/cuda.h>
#include <torch/custom_class.h>
#include <torch/version.h>

#include <sys/utsname.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

namespace aoti_runner {
namespace {

std::set<std::string> host_cpu_flags() {
  std::set<std::string> flags;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    auto key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    if (key == "flags" || key == "Features") {
      std::istringstream words(line.substr(colon + 1));
      for (std::string word; words >> word;) {
        flags.insert(word);
      }
    }
  }
  return flags;
}

bool dispatcher_has_op(const OpRef& op) {
  auto& dispatcher = c10::Dispatcher::singleton();
  if (op.overload) {
    const std::string overload = *op.overload == "default" ? "" : *op.overload;
    return dispatcher.findSchema(c10::OperatorName(op.name, overload)).has_value();
  }
  for (const auto& name : dispatcher.getAllOpNames()) {  // any overload of the name
    if (name.name == op.name) {
      return true;
    }
  }
  return false;
}

bool registered_class(const std::string& qualname) {
  const auto sep = qualname.find("::");
  const std::string fqn = "__torch__.torch.classes." + qualname.substr(0, sep) + "." +
                          (sep == std::string::npos ? "" : qualname.substr(sep + 2));
  return torch::getCustomClass(fqn) != nullptr;
}

std::string base_version(const std::string& version) {
  return version.substr(0, version.find('+'));  // "2.13.0+cpu" -> "2.13.0"
}

}  // namespace

HostFacts this_host() {
  HostFacts host;
  host.torch_version = TORCH_VERSION;
  struct utsname info {};
  host.machine = uname(&info) == 0 ? std::string(info.machine) : std::string();
  host.cpu_flags = host_cpu_flags();
  host.cuda_available = torch::cuda::is_available();
  host.has_op = dispatcher_has_op;
  host.has_class = registered_class;
  return host;
}

void check_runs_here(const PackageSpec& spec, const HostFacts& host) {
  if (base_version(spec.torch_version) != base_version(host.torch_version)) {
    throw RunnerError("the package was compiled with torch " + spec.torch_version +
                          ", but this runner is built against torch " + host.torch_version +
                          ". AOTI packages are not portable across torch versions; re-export the "
                          "package with this torch.",
                      "torch_version");
  }
  const auto device_type = spec.device.substr(0, spec.device.find(':'));
  if (device_type != "cpu" && device_type != "cuda") {
    throw RunnerError("the package was compiled for device '" + spec.device +
                          "', which this runner does not support (cpu or cuda).",
                      "device");
  }
  if (device_type == "cuda" && !host.cuda_available) {
    throw RunnerError("the package was compiled for " + spec.device +
                          ", but this process has no usable CUDA device (torch::cuda::is_available() "
                          "is false).\nRun it on a CUDA machine, or re-export with --device cpu.",
                      "device");
  }
  const auto machine_it = spec.aoti.find("AOTI_MACHINE");
  const auto machine = machine_it == spec.aoti.end() ? std::string() : machine_it->second;
  if (!machine.empty() && machine != host.machine) {
    throw RunnerError("the package was compiled for " + machine + ", but this host is " +
                          host.machine + ". Re-export the package on this kind of machine.",
                      "machine");
  }
  std::vector<std::string> missing;
  for (const auto& flag : spec.cpu_flags) {
    if (!host.cpu_flags.count(flag)) {
      missing.push_back(flag);
    }
  }
  if (!missing.empty()) {
    const auto isa_it = spec.aoti.find("AOTI_CPU_ISA");
    const auto isa = isa_it == spec.aoti.end() ? std::string("?") : isa_it->second;
    const bool native = spec.cpu_target.empty() || spec.cpu_target == "native";
    const std::string problem =
        native ? "the package was compiled (with -march=native, AOTI ISA '" + isa + "') on a CPU with"
               : "the package was compiled for CPU target " + spec.cpu_target + " (AOTI ISA '" + isa +
                     "'), which needs";
    std::string fix = native ? "Re-export it on a host with these CPU features"
                             : "Re-export it with --cpu-target native on a host like this one";
    if (host.machine == "x86_64") {
      fix += ", or with a --cpu-target level this host has (x86-64-v2 < x86-64-v3 < x86-64-v4)";
    }
    throw RunnerError(problem + " " + join(missing, ", ") +
                          ", which this host lacks. Running it could crash with an illegal instruction. " +
                          fix + ".",
                      "cpu_flags");
  }
  if (!spec.python_only_ops.empty() && !host.python) {
    throw RunnerError("the package calls " + join(spec.python_only_ops, ", ") +
                          ", which only Python can run (export_compile wrote it with "
                          "--allow-python-ops, for the Python runtime only). This runner has no "
                          "Python.\nRun it with run_inference, or define the ops in C++ "
                          "(TORCH_LIBRARY in an op library) and re-export without "
                          "--allow-python-ops.",
                      "python_only");
  }
}

namespace {

// What no loaded library registers, grouped by the library that defines it: missing
// holds (what, qualified name) pairs. The same words as the Python side's
// missing_libraries_message (runtime/preflight.py).
std::string missing_libraries_message(
    const PackageSpec& spec, const std::vector<std::pair<std::string, std::string>>& missing) {
  // Groups in the order their first item is missing, as the Python side's dict keeps.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& [what, qualname] : missing) {
    const auto ns = qualname.substr(0, qualname.find("::"));
    std::vector<std::string> owners;
    for (const auto& [library, spaces] : spec.op_library_namespaces) {
      if (std::find(spaces.begin(), spaces.end(), ns) != spaces.end()) {
        owners.push_back(library);
      }
    }
    std::string where;
    if (!owners.empty()) {
      where = join(owners, " or ");
    } else if (!spec.op_libraries.empty()) {
      where.append(spec.op_libraries.size() > 1 ? "one of " : "").append(join(spec.op_libraries, ", "));
    } else {
      where = "an op library the package does not name";
    }
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& entry) { return entry.first == where; });
    if (group == groups.end()) {
      groups.emplace_back(where, std::vector<std::string>{});
      group = std::prev(groups.end());
    }
    group->second.push_back(what);
  }
  std::vector<std::string> needs;
  for (const auto& [where, whats] : groups) {
    std::string need = join(whats, " and ");
    need.append(", defined in ").append(where);
    needs.push_back(need);
  }
  std::string message("no loaded library registers what the package needs: ");
  message.append(join(needs, "; "))
      .append(". Pass each library's path after the package or with --op-lib.");
  return message;
}

}  // namespace

void check_required_symbols(const PackageSpec& spec, const HostFacts& host) {
  std::vector<std::pair<std::string, std::string>> missing;
  for (const auto& op : spec.required_ops) {
    if (!host.has_op(op)) {
      std::string what("op ");  // appended: "op " + op.str() trips gcc 12's -Wrestrict
      missing.emplace_back(what.append(op.str()), op.name);
    }
  }
  for (const auto& cls : spec.required_classes) {
    if (!host.has_class(cls)) {
      missing.emplace_back("class " + cls, cls);
    }
  }
  if (!missing.empty()) {
    throw RunnerError(missing_libraries_message(spec, missing), "missing_symbols");
  }
}

}  // namespace aoti_runner
