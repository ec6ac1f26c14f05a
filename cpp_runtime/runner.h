// The C++ runner's library: load op libraries, read and preflight an AOTI package,
// tensor files shared with Python (torch.save format), input validation, bit
// comparison. main.cpp only parses arguments and prints.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

// Exit codes shared with the Python runner.
constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitUsage = 2;

// A failure the user can fix: it carries a full message and the exit code.
class RunnerError : public std::runtime_error {
 public:
  explicit RunnerError(const std::string& message, int exit_code = kExitUsage)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const {
    return exit_code_;
  }

 private:
  int exit_code_;
};

// One dimension of an input spec: a fixed size, or a [min, max] range.
struct DimSpec {
  int64_t min = 0;
  int64_t max = 0;
  bool is_static() const {
    return min == max;
  }
};

struct TensorSpec {
  std::vector<DimSpec> dims;
  std::string dtype;  // Python spelling: "float32", "bfloat16", ...
};

// What export_compile recorded in the package metadata (keys "identity_conv.*").
struct PackageSpec {
  std::vector<TensorSpec> inputs;
  std::string device;
  std::vector<std::string> required_ops;
  std::vector<std::string> required_classes;
  std::vector<std::string> op_libraries;
  bool is_identity = false;
  std::string torch_version;
  // The shapes the package was verified at; random inputs use them.
  std::vector<std::vector<int64_t>> example_shapes;
  // Instruction-set flags of the compile host (AOTI compiles with -march=native).
  std::vector<std::string> cpu_flags;
  // Ops only Python can run (exported with --allow-python-ops): this runner refuses.
  std::vector<std::string> python_only_ops;
  // Modules the Python runner imports for fakes or Python ops (shown by --inspect).
  std::vector<std::string> fake_modules;
  std::string optimizations;  // what export_compile's graph optimizations did
  // Groups of (input, dim) positions that must have equal sizes (one dynamic dim).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> shared_dims;
  std::map<std::string, std::string> raw;  // every metadata entry, for --inspect
};

// dlopen(RTLD_NOW | RTLD_GLOBAL) each library, in order; registration runs here.
void load_op_libraries(const std::vector<std::string>& paths);

// Checks that `path` is a readable, non-empty zip, then reads its metadata.
PackageSpec read_package_spec(const std::string& path);

// Throws a RunnerError naming each op or class the package needs and no loaded
// library registered, and the library to pass.
void check_required_symbols(const PackageSpec& spec);

// Throws a RunnerError if the package calls ops only Python can run: this process
// has no Python, so it refuses up front instead of failing at load.
void check_no_python_ops(const PackageSpec& spec);

// Throws if the package targets a torch version, device, machine or CPU this
// process cannot run (instead of failing at load or dying with SIGILL).
void check_device(const PackageSpec& spec);


// The facts --inspect prints, as ordered (name, value) rows.
std::vector<std::pair<std::string, std::string>> describe_package(const PackageSpec& spec);

// Tensor files: a list of tensors in torch.save format.
std::vector<at::Tensor> load_tensors(const std::string& path);
void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors);

// Tensor files hold CPU tensors; this moves them to the package's device.
std::vector<at::Tensor> to_package_device(const std::vector<at::Tensor>& tensors,
                                          const PackageSpec& spec);

// Seeded random inputs of the example shapes (else dynamic dims take their minimum).
std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed);

// Checks count, rank, each dim, dtype and device; returns contiguous copies where
// needed. Throws a one-line RunnerError on the first mismatch.
std::vector<at::Tensor> validate_inputs(const std::vector<at::Tensor>& inputs,
                                        const PackageSpec& spec);

// Loads the package and runs it once.
std::vector<at::Tensor> run_package(const std::string& path,
                                    const std::vector<at::Tensor>& inputs);

struct BitReport {
  bool identical = false;
  int64_t numel = 0;
  int64_t num_differ = 0;
  // Largest distance in units in the last place; -0.0 vs +0.0 is 0, NaN vs NaN 0,
  // NaN vs a number infinite. Unset when dtype or shape differ.
  std::optional<double> max_ulp;
  std::string detail;  // human-readable description of the first difference

  // Bit-identical, or (for ulp > 0) every element within `ulp` ULP of the reference.
  // 0 demands bit-identity: -0.0 against +0.0 is 0 ULP apart but not the same bits.
  bool within_ulp(int64_t ulp) const {
    return identical || (ulp > 0 && max_ulp.has_value() && *max_ulp <= static_cast<double>(ulp));
  }
};

// Compares bit patterns (same-width integer views), not float values.
BitReport compare_bits(const at::Tensor& actual, const at::Tensor& expected);

// Shared objects mapped into this process, from /proc/self/maps.
std::vector<std::string> loaded_shared_objects();

std::string format_shape(const TensorSpec& spec);
std::string format_sizes(const at::Tensor& t);

}  // namespace aoti_runner
