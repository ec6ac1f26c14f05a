// aoti_runner: runs an AOTInductor package from C++ with no Python in the process,
// then verifies the output bit-for-bit. Argument parsing and printing only; the
// work is in the runner core (core/, one file per concern) and bench.cpp.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "aoti_package.h"
#include "bench.h"
#include "bundle.h"
#include "check_plan.h"
#include "cpu_budget.h"
#include "errors.h"
#include "input_shape.h"
#include "op_libraries.h"
#include "package_file.h"
#include "preflight.h"
#include "private_folder.h"
#include "random_inputs.h"
#include "tensor_files.h"
#include "tolerance.h"
#include "validation.h"

namespace {

constexpr const char* kUsage = R"(Usage: aoti_runner <model.pt2> [OP_LIBRARY.so ...] [options]
       aoti_runner <BUNDLE_DIR> [options]

Runs an AOTInductor package written by export_compile, with no Python in the
process, and checks its outputs. Two checks, each named in the output:
  runtime parity     against --expected FILE, the package's own outputs (e.g. the
                     expected.pt of export_compile --save-reference): bitwise, since
                     every runtime of one package must give the same bits
  compiled vs eager  against --eager-reference FILE, eager's outputs (eager.pt):
                     under the tolerance recorded in the package at export
Without either, packages that declare an identity model are checked bitwise
against their inputs.

Every OP_LIBRARY (the positional ones, then each --op-lib, in order) is dlopen'ed
(RTLD_NOW | RTLD_GLOBAL) before the package loads, so the custom ops and torchbind
classes it registers are there for the package. Given none, the libraries the
package records are found as every command finds the build: the project's one at
$AOTI_DEPLOY_OPS_LIB, each in $AOTI_DEPLOY_BUILD_DIR, else beside this runner. The package's recorded input
specs are checked before anything runs. A package that calls ops only Python can
run (export_compile --allow-python-ops) is refused up front.

A bundle (export_compile --bundle DIR, or aoti-deploy bundle) is a folder with
model.pt2, the op libraries its package records, and an OpenSSF Model Signing
signature model.sig. Its op libraries are loaded from it, in the recorded order.
With a trusted key, the bundle is copied into a private folder (0700), the copy's
signature and every file's SHA-256 are verified, and only the copy is loaded:
nothing native runs before it is checked. An unsigned bundle, a bare .pt2, a
signature by another key or any changed, added or missing file is refused (exit 2).

Options:
  --op-lib FILE          another op library to load (repeatable; not with a bundle)
  --trusted-key PUB.pem  verify the bundle's signature with this EC public key
                         (default: $AOTI_DEPLOY_TRUSTED_KEY); refuse anything
                         unsigned
  --require-signature    refuse an unsigned bundle or a bare package, and a signed
                         bundle when no trusted key is set
  --inputs FILE          read the inputs from FILE: a list of tensors written by
                         torch.save([t, ...], FILE) or by --outputs, or for a
                         package that names its inputs a dict of name -> tensor
                         (torch.save({"input_ids": t, ...}, FILE))
  --outputs FILE         write the outputs to FILE: a dict of name -> tensor for a
                         package whose model returns its outputs by name (a dict),
                         in the package's order; else a list (tuple) of tensors
  --expected FILE        runtime parity: compare the outputs bit-for-bit with FILE
                         (a list, or a dict by output name as --inputs)
  --eager-reference FILE compiled vs eager: compare the outputs with FILE under the
                         package's recorded tolerance (torch.testing's rtol/atol
                         for each dtype in packages that record none)
  --rtol R --atol A      override the tolerance: |out - ref| <= A + R * |ref|
                         (torch.testing.assert_close's rule; NaN must face NaN)
  --max-ulp N            override it: every element within N ULP (0: bitwise)
  --bitwise              override it: the same bits
                         (the overrides apply to --eager-reference when it is
                         given, else to --expected or the identity check)
  --seed N               seed of the random input used without --inputs (default 0)
  --input-shape SHAPE    shape of the random input, e.g. 4,3,16,16 (repeat once per
                         input, in order), for a dynamic package: any shape in its
                         ranges; default: the shapes it was verified at
  --malloc POLICY        retain (default): glibc keeps freed memory for reuse
                         (M_MMAP_MAX=0, M_TRIM_THRESHOLD=max), so runs after the
                         first page-fault nothing in; system: glibc's defaults

Benchmark (timing inside this process; outputs of every run are checked):
  --bench N              run the package N times per thread after a warm-up and
                         print p50/p90/p99 latency, throughput and RSS at start and
                         end
  --iterations N         the same as --bench N (e.g. 10000 for a soak run)
  --warmup N             untimed runs per thread first (default 50)
  --threads T            serve from T threads, one model instance each (default 1)
  --intra-op-threads N   intra-op threads per serving thread (default: the faster
                         of 1 and cores / T, timed before the warm-up; the report
                         says which and why)
  --pin-threads          pin serving thread t to the t-th CPU this process may use
  --bench-json FILE      also write the results as JSON
  --inspect              print what the package records (inputs, device, required
                         ops and classes, torch version, CPU ISA) and exit; for a
                         bundle also its signature's key hint and each file's
                         SHA-256 against the signed one (verified only with
                         --trusted-key)
  --list-loaded-objects  print every shared object mapped into this process
  -h, --help             show this help

Exit codes: 0 PASSED, 1 outputs differ (beyond the tolerance), 2 usage, load or
input error.

Examples:
  aoti_runner artifacts/model.pt2 build/libidentity_conv_ops.so
  aoti_runner my_model.pt2 build/libidentity_conv_ops.so --op-lib build/libextra_ops.so \
      --inputs ref/inputs.pt --expected ref/expected.pt --eager-reference ref/eager.pt
  aoti_runner artifacts/bundle --trusted-key keys/signing.pub
)";

struct Options {
  std::string package;
  std::vector<std::string> libraries;
  std::string inputs;
  std::optional<aoti_runner::Shapes> input_shapes;  // --input-shape, for random inputs
  std::string outputs;
  std::string expected;
  std::string eager_reference;
  bool bitwise = false;
  std::optional<int64_t> max_ulp;
  std::optional<double> rtol;
  std::optional<double> atol;
  uint64_t seed = 0;
  std::string malloc_policy = "retain";
  int64_t bench_iterations = 0;  // 0: no benchmark
  aoti_runner::BenchOptions bench;
  std::string bench_json;
  bool list_loaded_objects = false;
  bool inspect = false;
  std::string trusted_key;
  bool require_signature = false;
};

// Ends the process without static destructors or atexit handlers. libtorch's
// destructors deregister every operator from the dispatcher, about 65 ms of a
// ~200 ms cold run, for a process that is about to vanish. By the time this is
// called, run() has returned, so its RAII locals (the package loader and its
// extracted files, a bundle's private copy, output files) are already closed; only
// the standard streams are left to flush.
[[noreturn]] void exit_now(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

std::string take_value(int argc, char** argv, int& i) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) {
    throw aoti_runner::RunnerError("option " + flag + " needs a value.\n\n" + kUsage);
  }
  return argv[++i];
}

// A non-negative integer written without a sign ("-1" would wrap in stoull).
uint64_t parse_unsigned(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0]))) {
      throw std::invalid_argument(value);
    }
    const auto parsed = std::stoull(value, &used);
    if (used != value.size()) {
      throw std::invalid_argument(value);
    }
    return parsed;
  } catch (const std::exception&) {
    throw aoti_runner::RunnerError(flag + " expects a non-negative integer, got '" + value + "'.");
  }
}

// A finite number >= 0 (a tolerance).
double parse_tolerance_value(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double parsed = std::stod(value, &used);
    if (used == value.size() && std::isfinite(parsed) && parsed >= 0) {
      return parsed;
    }
  } catch (const std::exception&) {
  }
  throw aoti_runner::RunnerError(flag + " must be a finite number >= 0, got " + value);
}

// A count in [low, high].
int64_t parse_count(const std::string& flag, const std::string& value, int64_t low,
                    int64_t high = std::numeric_limits<int32_t>::max()) {
  const auto parsed = parse_unsigned(flag, value);
  if (parsed < static_cast<uint64_t>(low) || parsed > static_cast<uint64_t>(high)) {
    throw aoti_runner::RunnerError(flag + " expects an integer in [" + std::to_string(low) + ", " +
                                   std::to_string(high) + "], got '" + value + "'.");
  }
  return static_cast<int64_t>(parsed);
}

// The folder of this executable (the build folder, or where it was installed).
std::string runner_dir() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// Every option parse_args takes, for the "did you mean" of a misspelt one.
const std::vector<std::string> kOptions = {
    "--help", "--inputs", "--input-shape", "--outputs", "--expected", "--eager-reference", "--bitwise", "--rtol",
    "--atol", "--op-lib", "--max-ulp", "--seed", "--malloc", "--bench", "--iterations", "--warmup", "--threads",
    "--intra-op-threads", "--pin-threads", "--bench-json", "--trusted-key", "--require-signature", "--inspect",
    "--list-loaded-objects"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// One line: the option, the closest known one (``_`` read as ``-``), and where the
// rest are, so the error does not scroll away under the usage text.
std::string unknown_option_message(const std::string& given) {
  std::string spelled = given.substr(0, given.find('='));
  std::replace(spelled.begin(), spelled.end(), '_', '-');
  std::string best;
  size_t best_distance = std::max<size_t>(3, spelled.size() / 3) + 1;
  for (const auto& option : kOptions) {
    const size_t distance = edit_distance(spelled, option);
    if (distance < best_distance) {
      best = option;
      best_distance = distance;
    }
  }
  return "unknown option " + given + "." + (best.empty() ? "" : " Did you mean " + best + "?") +
         " Run aoti_runner --help for every option.";
}

Options parse_args(int argc, char** argv) {
  Options options;
  std::vector<std::string> positional;
  std::vector<std::string> extra_libraries;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      exit_now(aoti_runner::kExitPass);
    } else if (arg == "--inputs") {
      options.inputs = take_value(argc, argv, i);
    } else if (arg == "--input-shape") {
      if (!options.input_shapes) {
        options.input_shapes.emplace();
      }
      options.input_shapes->push_back(aoti_runner::parse_shape(take_value(argc, argv, i)));
    } else if (arg == "--outputs") {
      options.outputs = take_value(argc, argv, i);
    } else if (arg == "--expected") {
      options.expected = take_value(argc, argv, i);
    } else if (arg == "--eager-reference") {
      options.eager_reference = take_value(argc, argv, i);
    } else if (arg == "--bitwise") {
      options.bitwise = true;
    } else if (arg == "--rtol") {
      options.rtol = parse_tolerance_value(arg, take_value(argc, argv, i));
    } else if (arg == "--atol") {
      options.atol = parse_tolerance_value(arg, take_value(argc, argv, i));
    } else if (arg == "--op-lib") {
      extra_libraries.push_back(take_value(argc, argv, i));
    } else if (arg == "--max-ulp") {
      const auto value = parse_unsigned(arg, take_value(argc, argv, i));
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw aoti_runner::RunnerError("--max-ulp is too large.");
      }
      options.max_ulp = static_cast<int64_t>(value);
    } else if (arg == "--seed") {
      options.seed = parse_unsigned(arg, take_value(argc, argv, i));
    } else if (arg == "--malloc") {
      options.malloc_policy = take_value(argc, argv, i);
    } else if (arg == "--bench" || arg == "--iterations") {
      options.bench_iterations = parse_count(arg, take_value(argc, argv, i), 1);
    } else if (arg == "--warmup") {
      options.bench.warmup = parse_count(arg, take_value(argc, argv, i), 0);
    } else if (arg == "--threads") {
      options.bench.threads = static_cast<int>(parse_count(arg, take_value(argc, argv, i), 1, 256));
    } else if (arg == "--intra-op-threads") {
      options.bench.intra_op_threads =
          static_cast<int>(parse_count(arg, take_value(argc, argv, i), 1, 1024));
    } else if (arg == "--pin-threads") {
      options.bench.pin_threads = true;
    } else if (arg == "--bench-json") {
      options.bench_json = take_value(argc, argv, i);
    } else if (arg == "--trusted-key") {
      options.trusted_key = take_value(argc, argv, i);
      if (options.trusted_key.empty()) {
        throw aoti_runner::RunnerError("--trusted-key needs a path to a PEM public key.");
      }
    } else if (arg == "--require-signature") {
      options.require_signature = true;
    } else if (arg == "--inspect") {
      options.inspect = true;
    } else if (arg == "--list-loaded-objects") {
      options.list_loaded_objects = true;
    } else if (arg.rfind("--", 0) == 0) {
      throw aoti_runner::RunnerError(unknown_option_message(arg));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty()) {
    throw aoti_runner::RunnerError(std::string("missing the package path.\n\n") + kUsage);
  }
  if (options.input_shapes && !options.inputs.empty()) {
    throw aoti_runner::RunnerError(
        "--input-shape sets the shape of the random inputs, which --inputs replaces; pass one or "
        "the other.");
  }
  // Conflicting tolerance options are a usage error before anything loads.
  aoti_runner::tolerance_from_options(options.bitwise, options.max_ulp, options.rtol, options.atol,
                                      aoti_runner::Tolerance{});
  options.package = positional.front();
  options.libraries.assign(positional.begin() + 1, positional.end());
  options.libraries.insert(options.libraries.end(), extra_libraries.begin(), extra_libraries.end());
  return options;
}

// The reference files, read before the package runs: a bad one is refused before any
// output is written.
struct References {
  std::vector<at::Tensor> expected;
  std::vector<at::Tensor> eager;
};

// The checks the options ask for (plan_checks, the same plan as run_inference's), each
// printed as report lines and a verdict line, then the overall PASSED or FAILED.
int verify_outputs(const Options& options, const aoti_runner::PackageSpec& spec, const References& references,
                   const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  using namespace aoti_runner;
  const bool overridden = options.bitwise || options.max_ulp || options.rtol || options.atol;
  const auto override_rule =
      overridden ? std::optional<Tolerance>(tolerance_from_options(options.bitwise, options.max_ulp, options.rtol,
                                                                   options.atol, Tolerance{}))
                 : std::nullopt;
  const auto checks = plan_checks(!options.expected.empty(), !options.eager_reference.empty(), spec.is_identity,
                                  spec.eager_check, override_rule);
  if (checks.empty()) {
    std::cout << "verify: skipped (the package does not declare an identity model; pass "
                 "--expected FILE or --eager-reference FILE)\nDONE\n";
    return kExitPass;
  }
  bool passed = true;
  for (const auto& check : checks) {
    const auto& compared = check.references == CheckReferences::kExpected ? references.expected
                           : check.references == CheckReferences::kEager  ? references.eager
                                                                          : inputs;
    if (outputs.size() != compared.size()) {
      std::cout << check.name << ": the package returned " << outputs.size()
                << " output(s), but there are " << compared.size() << " "
                << check.reference_name << " tensor(s) to compare with\n";
      passed = false;
      continue;
    }
    std::vector<Comparison> comparisons;
    const auto labels = compared_labels(spec, check.reference_name, outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      comparisons.push_back(compare(outputs[i], compared[i], check.tolerance));
      std::cout << "verify: " << labels[i] << " (" << comparisons.back().rule() << "): " << comparisons.back().line()
                << "\n";
    }
    std::cout << check.name << ": " << verdict_line(comparisons) << "\n";
    passed = passed && list_verdict(comparisons) != Verdict::kFailed;
  }
  std::cout << (passed ? "PASSED" : "FAILED") << "\n";
  return passed ? kExitPass : kExitMismatch;
}

// --inspect: what the package records and, for a bundle, its files against the
// signature, verified first with --trusted-key (as aoti-deploy inspect does; the
// environment's key is for runs).
int inspect(const Options& options) {
  using namespace aoti_runner;
  std::error_code ec;
  std::optional<OpenedModel> model;
  std::optional<BundleLayout> layout;
  PackageSpec spec;
  if (!options.trusted_key.empty()) {
    model = open_model(options.package, trust_policy(options.trusted_key, false));
    std::cout << model->status << "\n";
    spec = model->spec;
    layout = read_bundle_layout(options.package);
  } else if (std::filesystem::is_directory(options.package, ec)) {
    layout = read_bundle_layout(options.package);
    spec = read_package_spec(options.package + "/" + kBundlePackage);
  } else {
    spec = read_package_spec(options.package);
  }
  std::cout << "package: " << options.package << "\n";
  for (const auto& [name, value] : describe_package(spec)) {
    std::cout << name << ": " << value << "\n";
  }
  if (layout) {
    for (const auto& [name, value] :
         describe_bundle(*layout, options.package, model ? &*model : nullptr, options.trusted_key)) {
      std::cout << name << ": " << value << "\n";
    }
  }
  return kExitPass;
}

int run(const Options& options) {
  using namespace aoti_runner;
  // What runners killed while loading left in $TMPDIR (their owners are gone) goes first.
  remove_orphaned_private_folders();
  const auto malloc_policy = parse_malloc_policy(options.malloc_policy);
  apply_malloc_policy(malloc_policy);
  // The CPU budget's rule (one serving thread), unless OpenMP's own setting is given;
  // the benchmark sets its threads' count itself.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    at::set_num_threads(intra_op_threads_for(usable_cpus(), 1));
  }
  if (options.inspect) {
    return inspect(options);
  }
  const auto policy = trust_policy(options.trusted_key, options.require_signature);
  std::error_code ec;
  if (std::filesystem::is_directory(options.package, ec) && !options.libraries.empty()) {
    std::string names;
    for (const auto& name : read_bundle_layout(options.package).libraries) {
      names.append(names.empty() ? "" : ", ").append(name);
    }
    throw RunnerError("a bundle carries its own op libraries (" + (names.empty() ? "none" : names) +
                      "); do not pass op libraries with it");
  }
  // The trust policy first: with a trusted key, what loads below is the verified
  // private copy, and nothing native has run before this returns.
  // One load, so a verified package is unpacked as it is hashed (Loads::once).
  const auto model = open_model(options.package, policy, Loads::once);
  if (!model.status.empty()) {
    std::cout << model.status << std::endl;  // flushed: what a watcher sees before loading starts
  }
  const auto& spec = model.spec;
  // Given none, the package's recorded libraries come from the build folder, as
  // run_inference finds them.
  const auto libraries = model.is_bundle               ? model.op_libraries
                         : !options.libraries.empty() ? op_library_files(options.libraries)
                                                      : find_recorded_op_libraries(spec.op_libraries, runner_dir());
  prepare_package(spec, libraries);
  for (const auto& lib : libraries) {
    std::cout << "loaded op library " << lib.shown << "\n";
  }

  std::vector<at::Tensor> inputs;
  if (options.inputs.empty()) {
    inputs = make_random_inputs(spec, options.seed, options.input_shapes);
    std::cout << "input: random (seed " << options.seed << ")\n";
  } else {
    inputs = to_package_device(load_tensors(options.inputs, tensor_names(spec.inputs), "input"), spec);
    std::cout << "input: " << options.inputs << "\n";
  }
  const auto ready = validate_inputs(inputs, spec);
  References references;
  if (!options.expected.empty()) {
    references.expected = load_tensors(options.expected, tensor_names(spec.outputs), "output");
  }
  if (!options.eager_reference.empty()) {
    references.eager = load_tensors(options.eager_reference, tensor_names(spec.outputs), "output");
  }
  for (size_t i = 0; i < ready.size(); ++i) {
    std::cout << tensor_label("input", i, spec.inputs) << ": " << format_sizes(ready[i]) << " "
              << spec.inputs[i].dtype << " on " << spec.device << "\n";
  }

  std::vector<at::Tensor> outputs;
  if (options.bench_iterations > 0) {
    auto bench_options = options.bench;
    bench_options.iterations = options.bench_iterations;
    bench_options.floor = spec.is_identity ? Floor::kIdentityFourCopies : Floor::kCopyInputsOutputs;
    const auto result = bench_package(model.package, ready, bench_options, model.package_shown, model.unpacked);
    std::cout << describe_bench(result, describe_malloc_policy(malloc_policy));
    if (const auto note = thread_count_note(spec.intra_op_threads, result.intra_op_threads); !note.empty()) {
      std::cout << "note: " << note << "\n";
    }
    const auto json = bench_json(result, options.malloc_policy);
    std::cout << "bench json: " << json << "\n";
    if (!options.bench_json.empty()) {
      std::ofstream file(options.bench_json);
      file << json << "\n";
      if (!file) {
        throw RunnerError("could not write " + options.bench_json);
      }
    }
    if (result.mismatched_outputs > 0) {
      std::cout << "bench: " << result.mismatched_outputs
                << " run(s) returned outputs whose bits differ from the first run's\nFAILED\n";
      return kExitMismatch;
    }
    outputs = result.reference_outputs;
  } else {
    if (const auto note = thread_count_note(spec.intra_op_threads, at::get_num_threads()); !note.empty()) {
      std::cout << "note: " << note << "\n";
    }
    outputs = run_package(model.package, ready, model.package_shown, model.unpacked);
  }
  std::cout << "ran " << options.package << ": " << outputs.size() << " output(s)\n";
  for (const auto& line : scalar_output_lines(spec, outputs)) {
    std::cout << line << "\n";
  }
  if (!options.outputs.empty()) {
    save_tensors(options.outputs, outputs, named_outputs(spec, outputs.size()));
    std::cout << "wrote outputs to " << options.outputs << "\n";
  }
  if (options.list_loaded_objects) {
    for (const auto& object : loaded_shared_objects()) {
      std::cout << "loaded object: " << object << "\n";
    }
  }

  return verify_outputs(options, spec, references, ready, outputs);
}

int run_and_report(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const aoti_runner::RunnerError& e) {
    std::cerr << "aoti_runner: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const c10::Error& e) {
    std::cerr << "aoti_runner: error: " << e.what_without_backtrace() << "\n";
    return aoti_runner::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "aoti_runner: error: " << e.what() << "\n";
    return aoti_runner::kExitUsage;
  } catch (...) {
    std::cerr << "aoti_runner: error: unknown exception (not derived from std::exception)\n";
    return aoti_runner::kExitUsage;
  }
}

}  // namespace

int main(int argc, char** argv) {
  exit_now(run_and_report(argc, argv));
}
