// aoti_runner: runs an AOTInductor package from C++ with no Python in the process,
// then verifies the output bit-for-bit. Argument parsing and printing only; the
// work is in runner.cpp.
#include <c10/util/Exception.h>

#include <cctype>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "runner.h"

namespace {

constexpr const char* kUsage = R"(Usage: aoti_runner <model.pt2> [OP_LIBRARY.so ...] [options]

Runs an AOTInductor package written by export_compile, with no Python in the
process, and checks the output bit-for-bit against the input (identity models).

Every OP_LIBRARY is dlopen'ed (RTLD_NOW | RTLD_GLOBAL) before the package loads,
so the custom ops and torchbind classes it registers are there for the package.
The package's recorded input specs are checked before anything runs.

Options:
  --inputs FILE          read the inputs from FILE: a list of tensors written by
                         torch.save([t, ...], FILE) or by --outputs
  --outputs FILE         write the outputs to FILE in the same format
  --seed N               seed of the random input used without --inputs (default 0)
  --inspect              print what the package records (inputs, device, required
                         ops and classes, torch version, CPU ISA) and exit
  --list-loaded-objects  print every shared object mapped into this process
  -h, --help             show this help

Exit codes: 0 PASSED, 1 output bits differ, 2 usage, load or input error.

Example:
  aoti_runner artifacts/model.pt2 build/libidentity_conv_ops.so
)";

struct Options {
  std::string package;
  std::vector<std::string> libraries;
  std::string inputs;
  std::string outputs;
  uint64_t seed = 0;
  bool list_loaded_objects = false;
  bool inspect = false;
};

std::string take_value(int argc, char** argv, int& i) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) {
    throw aoti_runner::RunnerError("option " + flag + " needs a value.\n\n" + kUsage);
  }
  return argv[++i];
}

Options parse_args(int argc, char** argv) {
  Options options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(aoti_runner::kExitPass);
    } else if (arg == "--inputs") {
      options.inputs = take_value(argc, argv, i);
    } else if (arg == "--outputs") {
      options.outputs = take_value(argc, argv, i);
    } else if (arg == "--seed") {
      const auto value = take_value(argc, argv, i);
      try {
        size_t used = 0;
        // stoull accepts "-1" and wraps it; a seed must be written without a sign.
        if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0]))) {
          throw std::invalid_argument(value);
        }
        options.seed = std::stoull(value, &used);
        if (used != value.size()) {
          throw std::invalid_argument(value);
        }
      } catch (const std::exception&) {
        throw aoti_runner::RunnerError("--seed expects a non-negative integer, got '" + value +
                                       "'.");
      }
    } else if (arg == "--inspect") {
      options.inspect = true;
    } else if (arg == "--list-loaded-objects") {
      options.list_loaded_objects = true;
    } else if (arg.rfind("--", 0) == 0) {
      throw aoti_runner::RunnerError("unknown option " + arg + ".\n\n" + kUsage);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.empty()) {
    throw aoti_runner::RunnerError(std::string("missing the package path.\n\n") + kUsage);
  }
  options.package = positional.front();
  options.libraries.assign(positional.begin() + 1, positional.end());
  return options;
}

int run(const Options& options) {
  using namespace aoti_runner;
  const auto spec = read_package_spec(options.package);
  if (options.inspect) {
    std::cout << "package: " << options.package << "\n";
    for (const auto& [name, value] : describe_package(spec)) {
      std::cout << name << ": " << value << "\n";
    }
    return kExitPass;
  }
  load_op_libraries(options.libraries);
  for (const auto& lib : options.libraries) {
    std::cout << "loaded op library " << lib << "\n";
  }
  check_required_symbols(spec);
  check_device(spec);

  std::vector<at::Tensor> inputs;
  if (options.inputs.empty()) {
    inputs = make_random_inputs(spec, options.seed);
    std::cout << "input: random (seed " << options.seed << ")\n";
  } else {
    inputs = to_package_device(load_tensors(options.inputs), spec);
    std::cout << "input: " << options.inputs << "\n";
  }
  const auto ready = validate_inputs(inputs, spec);
  for (size_t i = 0; i < ready.size(); ++i) {
    std::cout << "input[" << i << "]: " << format_sizes(ready[i]) << " "
              << spec.inputs[i].dtype << " on " << spec.device << "\n";
  }

  const auto outputs = run_package(options.package, ready);
  std::cout << "ran " << options.package << ": " << outputs.size() << " output(s)\n";
  if (!options.outputs.empty()) {
    save_tensors(options.outputs, outputs);
    std::cout << "wrote outputs to " << options.outputs << "\n";
  }
  if (options.list_loaded_objects) {
    for (const auto& object : loaded_shared_objects()) {
      std::cout << "loaded object: " << object << "\n";
    }
  }

  if (!spec.is_identity) {
    std::cout << "verify: skipped (the package does not declare an identity model)\n";
    std::cout << "DONE\n";
    return kExitPass;
  }
  if (outputs.size() != ready.size()) {
    std::cout << "verify: identity model returned " << outputs.size() << " outputs for "
              << ready.size() << " inputs\nFAILED\n";
    return kExitMismatch;
  }
  bool all_identical = true;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto report = compare_bits(outputs[i], ready[i]);
    std::cout << "verify: output[" << i << "] vs input[" << i << "] (bitwise): "
              << report.detail << "\n";
    all_identical = all_identical && report.identical;
  }
  std::cout << (all_identical ? "PASSED" : "FAILED") << "\n";
  return all_identical ? kExitPass : kExitMismatch;
}

}  // namespace

int main(int argc, char** argv) {
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
