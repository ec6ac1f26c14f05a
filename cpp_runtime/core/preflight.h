// Preflight: can this process run a package? Checked from the spec alone, before
// the package loads: torch version, device, machine, CPU instruction sets and
// Python-only ops; then, once the op libraries are loaded, the ops and classes the
// package calls. Pairs with python/aoti_deploy/runtime/preflight.py; the vectors in
// tests/contract/preflight_vectors.json pin both to one verdict per case. The host
// is passed in, so the vectors can describe any host.
#pragma once

#include "package_spec.h"

#include <functional>
#include <set>
#include <string>

namespace aoti_runner {

struct HostFacts {
  std::string torch_version;
  std::string machine;
  std::set<std::string> cpu_flags;
  bool cuda_available = false;
  std::function<bool(const OpRef&)> has_op;
  std::function<bool(const std::string&)> has_class;  // "ns::Name"
  bool python = false;  // this runner has no Python: Python-only ops cannot run
};

// This process: its torch, machine, /proc/cpuinfo flags, CUDA, and the dispatcher's
// ops and torchbind classes.
HostFacts this_host();

// Kinds, in the order checked: torch_version, device, machine, cpu_flags, python_only.
void check_runs_here(const PackageSpec& spec, const HostFacts& host);

// Kind missing_symbols: names each op (with its overload) or class the package calls
// that nothing loaded registers, grouped by the library that defines it (from the
// spec's op_library_namespaces, else every recorded library).
void check_required_symbols(const PackageSpec& spec, const HostFacts& host);

}  // namespace aoti_runner
