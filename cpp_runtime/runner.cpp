// Implementation of the C++ runner's library (see runner.h).
#include "runner.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <torch/custom_class.h>
#include <torch/serialize.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

namespace aoti_runner {
namespace {

constexpr const char* kMetaPrefix = "identity_conv.";
constexpr const char* kDefaultLibrary = "build/libidentity_conv_ops.so";

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  if (text.empty()) {
    return parts;
  }
  std::string part;
  std::istringstream stream(text);
  while (std::getline(stream, part, sep)) {
    if (!part.empty()) {  // like the Python reader: "a,,b" is "a", "b"
      parts.push_back(part);
    }
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i ? sep : "") + parts[i];
  }
  return out;
}

int64_t parse_int(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == text.size()) {
      return value;
    }
  } catch (const std::exception&) {
  }
  throw RunnerError("package metadata is malformed: " + what + " has '" + text +
                    "', expected an integer. Re-export the package with export_compile.");
}

// "float32:1..8,3,224,224" -> TensorSpec
TensorSpec parse_tensor_spec(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    throw RunnerError("package metadata is malformed: input spec '" + text +
                      "' has no dtype. Re-export the package with export_compile.");
  }
  TensorSpec spec;
  spec.dtype = text.substr(0, colon);
  if (spec.dtype.empty()) {
    throw RunnerError("package metadata is malformed: input spec '" + text +
                      "' has no dtype. Re-export the package with export_compile.");
  }
  for (const auto& dim : split(text.substr(colon + 1), ',')) {
    const auto dots = dim.find("..");
    DimSpec d;
    if (dots == std::string::npos) {
      d.min = d.max = parse_int(dim, "an input dim");
    } else {
      d.min = parse_int(dim.substr(0, dots), "an input dim range");
      d.max = parse_int(dim.substr(dots + 2), "an input dim range");
    }
    if (d.min < 0 || d.min > d.max) {
      throw RunnerError("package metadata is malformed: input spec '" + text + "' has the empty range '" +
                        dim + "'. Re-export the package with export_compile.");
    }
    spec.dims.push_back(d);
  }
  return spec;
}

std::optional<at::ScalarType> dtype_from_name(const std::string& name) {
  static const std::map<std::string, at::ScalarType> names = {
      {"float16", at::kHalf},  {"bfloat16", at::kBFloat16}, {"float32", at::kFloat},
      {"float64", at::kDouble}, {"int8", at::kChar},        {"uint8", at::kByte},
      {"int16", at::kShort},   {"int32", at::kInt},         {"int64", at::kLong},
      {"bool", at::kBool},
  };
  const auto it = names.find(name);
  if (it == names.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

std::string hex_bits(const at::Tensor& int_scalar, int64_t width_bytes) {
  const auto value = static_cast<uint64_t>(int_scalar.item<int64_t>());
  const uint64_t mask = width_bytes >= 8 ? ~0ULL : ((1ULL << (width_bytes * 8)) - 1);
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(static_cast<int>(width_bytes * 2))
      << std::setfill('0') << (value & mask);
  return out.str();
}

std::string format_value(double value) {
  if (std::isnan(value)) {
    return "nan";
  }
  std::ostringstream out;
  out << std::setprecision(9) << value;
  return out.str();
}

std::string read_file_prefix(const std::string& path, size_t n) {
  std::ifstream file(path, std::ios::binary);
  std::string data(n, '\0');
  file.read(data.data(), static_cast<std::streamsize>(n));
  data.resize(static_cast<size_t>(file.gcount()));
  return data;
}

// Translates c10/std exceptions from torch into a RunnerError with context.
[[noreturn]] void rethrow_with_context(const std::string& what_failed, const std::exception& e,
                                       const std::string& hint) {
  std::string message = e.what();
  // c10::Error appends a C++ backtrace; the first line is what the user needs.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    message = c10_error->what_without_backtrace();
  }
  const auto newline = message.find("\nException raised from");
  if (newline != std::string::npos) {
    message = message.substr(0, newline);
  }
  throw RunnerError(what_failed + ": " + message + (hint.empty() ? "" : "\n" + hint));
}

}  // namespace

std::string format_shape(const TensorSpec& spec) {
  std::vector<std::string> dims;
  for (const auto& d : spec.dims) {
    dims.push_back(d.is_static() ? std::to_string(d.min)
                                 : std::to_string(d.min) + ".." + std::to_string(d.max));
  }
  return "[" + join(dims, ", ") + "]";
}

std::string format_sizes(const at::Tensor& t) {
  std::vector<std::string> dims;
  for (const auto s : t.sizes()) {
    dims.push_back(std::to_string(s));
  }
  return "[" + join(dims, ", ") + "]";
}

void load_op_libraries(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    if (!std::filesystem::exists(path)) {
      throw RunnerError("op library not found: " + path +
                        "\nBuild it with ./scripts/setup.sh (it writes " + kDefaultLibrary +
                        ") and pass its path after the package.");
    }
    // An absolute path: dlopen of a bare name would search the library path instead of
    // the file checked above. RTLD_GLOBAL: the package resolves the library's symbols.
    const auto absolute = std::filesystem::absolute(path).string();
    if (dlopen(absolute.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* error = dlerror();
      throw RunnerError("could not load op library " + path + ": " +
                        (error ? error : "unknown dlopen error") +
                        "\nPass a shared library built against this runner's torch.");
    }
  }
}

PackageSpec read_package_spec(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw RunnerError("package not found: " + path +
                      "\nCreate it with `export_compile` (default output artifacts/model.pt2).");
  }
  if (!fs::is_regular_file(path, ec)) {
    throw RunnerError("package path is not a file: " + path +
                      "\nPass the .pt2 file written by export_compile.");
  }
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) {
    throw RunnerError("package is empty (0 bytes): " + path +
                      "\nRe-create it with `export_compile`.");
  }
  if (read_file_prefix(path, 4) != std::string("PK\x03\x04", 4) &&
      fs::path(path).extension() == ".onnx") {
    throw RunnerError("this is an ONNX file, not an AOTI package: " + path +
                      "\nThe C++ runner runs .pt2 packages. Run ONNX files in onnxruntime, e.g. with "
                      "`run_inference " + path + "`.");
  }
  if (read_file_prefix(path, 4) != std::string("PK\x03\x04", 4)) {
    throw RunnerError("package is not a zip archive (an AOTI .pt2 package is one): " + path +
                      "\nPass the .pt2 file written by export_compile.");
  }

  std::unordered_map<std::string, std::string> metadata;
  try {
    metadata = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, "model");
  } catch (const std::exception& e) {
    rethrow_with_context("could not read the AOTI package " + path, e,
                         "The file is damaged or is not an AOTI package; re-create it with "
                         "`export_compile`.");
  }

  PackageSpec spec;
  for (const auto& [key, value] : metadata) {
    spec.raw[key] = value;
  }
  const auto get = [&](const std::string& key) -> std::optional<std::string> {
    const auto it = metadata.find(kMetaPrefix + key);
    if (it == metadata.end()) {
      return std::nullopt;
    }
    return it->second;
  };
  const auto inputs = get("inputs");
  if (!inputs) {
    throw RunnerError("package " + path +
                      " has no identity_conv metadata (no 'identity_conv.inputs' entry), so "
                      "its inputs cannot be validated.\nCreate the package with "
                      "`export_compile`, which records them.");
  }
  for (const auto& input : split(*inputs, ';')) {
    spec.inputs.push_back(parse_tensor_spec(input));
  }
  spec.device = get("device").value_or("cpu");
  spec.required_ops = split(get("required_ops").value_or(""), ',');
  spec.required_classes = split(get("required_classes").value_or(""), ',');
  spec.op_libraries = split(get("op_libraries").value_or(""), ',');
  spec.is_identity = get("is_identity").value_or("0") == "1";
  spec.torch_version = get("torch_version").value_or("unknown");
  spec.cpu_flags = split(get("cpu_flags").value_or(""), ' ');
  spec.python_only_ops = split(get("python_only_ops").value_or(""), ',');
  spec.fake_modules = split(get("fake_modules").value_or(""), ',');
  spec.optimizations = get("optimizations").value_or("");
  for (const auto& group : split(get("shared_dims").value_or(""), ';')) {
    std::vector<std::pair<int64_t, int64_t>> positions;
    for (const auto& position : split(group, ',')) {
      const auto dot = position.find('.');
      if (dot == std::string::npos) {
        throw RunnerError("package metadata is malformed: shared dims '" + group +
                          "'. Re-export the package with export_compile.");
      }
      positions.emplace_back(parse_int(position.substr(0, dot), "a shared dim"),
                             parse_int(position.substr(dot + 1), "a shared dim"));
    }
    spec.shared_dims.push_back(positions);
  }
  for (const auto& shape : split(get("example_shapes").value_or(""), ';')) {
    std::vector<int64_t> sizes;
    for (const auto& size : split(shape, ',')) {
      sizes.push_back(parse_int(size, "an example shape"));
    }
    spec.example_shapes.push_back(sizes);
  }
  return spec;
}

void check_required_symbols(const PackageSpec& spec) {
  std::vector<std::string> missing;
  for (const auto& op : spec.required_ops) {
    if (!c10::Dispatcher::singleton().findSchema(c10::OperatorName(op, "")).has_value()) {
      missing.push_back("op " + op);
    }
  }
  for (const auto& cls : spec.required_classes) {
    const auto sep = cls.find("::");
    const std::string qualified = "__torch__.torch.classes." + cls.substr(0, sep) + "." +
                                  (sep == std::string::npos ? "" : cls.substr(sep + 2));
    if (torch::getCustomClass(qualified) == nullptr) {
      missing.push_back("class " + cls);
    }
  }
  if (missing.empty()) {
    return;
  }
  const std::string libs =
      spec.op_libraries.empty() ? std::string("the op library") : join(spec.op_libraries, ", ");
  throw RunnerError("the package needs " + join(missing, " and ") +
                    ", which no loaded library registers. They are defined in " + libs +
                    ".\nPass each library after the package or with --op-lib, e.g.: "
                    "aoti_runner <model.pt2> " +
                    (spec.op_libraries.empty() ? std::string(kDefaultLibrary)
                                               : join(spec.op_libraries, " ")));
}

void check_no_python_ops(const PackageSpec& spec) {
  if (spec.python_only_ops.empty()) {
    return;
  }
  throw RunnerError("the package calls " + join(spec.python_only_ops, ", ") +
                    ", which only Python can run (export_compile wrote it with "
                    "--allow-python-ops, for the Python runtime only). This runner has no "
                    "Python.\nRun it with run_inference, or define the ops in C++ (TORCH_LIBRARY "
                    "in an op library) and re-export without --allow-python-ops.");
}

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
      std::string word;
      while (words >> word) {
        flags.insert(word);
      }
    }
  }
  return flags;
}

std::string base_version(const std::string& version) {
  return version.substr(0, version.find('+'));  // "2.13.0+cpu" -> "2.13.0"
}

std::string host_machine() {
  struct utsname info {};
  return uname(&info) == 0 ? std::string(info.machine) : std::string();
}

}  // namespace

void check_device(const PackageSpec& spec) {
  const std::string runtime_version = TORCH_VERSION;
  if (base_version(spec.torch_version) != base_version(runtime_version)) {
    throw RunnerError("the package was compiled with torch " + spec.torch_version +
                      ", but this runner is built against torch " + runtime_version +
                      ". AOTI packages are not portable across torch versions; re-export the "
                      "package with this torch.");
  }
  if (spec.device.rfind("cuda", 0) == 0 && !torch::cuda::is_available()) {
    throw RunnerError("the package was compiled for " + spec.device +
                      ", but this process has no usable CUDA device (torch::cuda::is_available() "
                      "is false).\nRun it on a CUDA machine, or re-export with --device cpu.");
  }
  if (spec.device != "cpu" && spec.device.rfind("cuda", 0) != 0) {
    throw RunnerError("the package was compiled for device '" + spec.device +
                      "', which this runner does not support (cpu or cuda).");
  }
  const auto machine = spec.raw.count("AOTI_MACHINE") ? spec.raw.at("AOTI_MACHINE") : "";
  if (!machine.empty() && machine != host_machine()) {
    throw RunnerError("the package was compiled for " + machine + ", but this host is " +
                      host_machine() + ". Re-export the package on this kind of machine.");
  }
  const auto host_flags = host_cpu_flags();
  std::vector<std::string> missing;
  for (const auto& flag : spec.cpu_flags) {
    if (!host_flags.count(flag)) {
      missing.push_back(flag);
    }
  }
  if (!missing.empty()) {
    const auto isa = spec.raw.count("AOTI_CPU_ISA") ? spec.raw.at("AOTI_CPU_ISA") : "?";
    throw RunnerError("the package was compiled (with -march=native, AOTI ISA '" + isa +
                      "') on a CPU with " + join(missing, ", ") +
                      ", which this host lacks. Running it could crash with an illegal "
                      "instruction. Re-export the package on this host or one with the same CPU "
                      "features.");
  }
}

std::vector<at::Tensor> load_tensors(const std::string& path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) {
    throw RunnerError("tensor file not found: " + path +
                      "\nWrite one from Python with torch.save([tensor, ...], path).");
  }
  std::ifstream file(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.empty()) {
    throw RunnerError("tensor file is empty: " + path +
                      "\nWrite one from Python with torch.save([tensor, ...], path).");
  }
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    rethrow_with_context("could not read tensor file " + path, e,
                         "Expected a file written by torch.save([tensor, ...], path) "
                         "or by this runner's --outputs.");
  }
  std::vector<at::Tensor> tensors;
  if (value.isTensor()) {
    tensors.push_back(value.toTensor());
    return tensors;
  }
  if (!value.isList() && !value.isTuple()) {
    throw RunnerError("tensor file " + path + " holds a " + value.tagKind() +
                      ", expected a list of tensors.\nWrite it with "
                      "torch.save([tensor, ...], path).");
  }
  const auto elements = value.isList() ? value.toListRef().vec() : value.toTupleRef().elements().vec();
  for (size_t i = 0; i < elements.size(); ++i) {
    if (!elements[i].isTensor()) {
      throw RunnerError("tensor file " + path + ": element " + std::to_string(i) + " is of type " +
                        elements[i].tagKind() + ", expected a tensor.");
    }
    tensors.push_back(elements[i].toTensor());
  }
  return tensors;
}

void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  // A tuple pickles with no type tag. Lists of any element type get
  // torch.jit._pickle.build_tensorlist / restore_type_tag, which
  // torch.load(weights_only=True) refuses; load_tensors in Python reads tuples too.
  std::vector<c10::IValue> elements;
  for (const auto& t : tensors) {
    // torch.save writes CPU storages; move outputs off the device first.
    elements.emplace_back(t.cpu());
  }
  const auto list = c10::ivalue::Tuple::create(std::move(elements));
  const auto bytes = torch::pickle_save(c10::IValue(list));
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::filesystem::create_directories(parent);
  }
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) {
    throw RunnerError("could not write outputs to " + path);
  }
}

std::vector<at::Tensor> to_package_device(const std::vector<at::Tensor>& tensors,
                                          const PackageSpec& spec) {
  std::vector<at::Tensor> moved;
  for (const auto& t : tensors) {
    moved.push_back(spec.device == "cpu" ? t : t.to(at::Device(spec.device)));
  }
  return moved;
}

std::vector<at::Tensor> make_random_inputs(const PackageSpec& spec, uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto& input = spec.inputs[i];
    std::vector<int64_t> sizes;
    if (i < spec.example_shapes.size()) {
      sizes = spec.example_shapes[i];
    } else {
      for (const auto& d : input.dims) {
        sizes.push_back(d.min);
      }
    }
    const auto dtype = dtype_from_name(input.dtype);
    // Like the Python runner: random values only for the float dtypes.
    if (!dtype || !at::isFloatingType(*dtype)) {
      throw RunnerError("cannot generate a random input of dtype " + input.dtype +
                        "; pass --inputs FILE.");
    }
    auto t = at::randn(sizes, generator, at::TensorOptions().dtype(at::kFloat)).to(*dtype);
    if (spec.device != "cpu") {
      t = t.to(at::Device(spec.device));
    }
    inputs.push_back(t);
  }
  return inputs;
}

std::vector<at::Tensor> validate_inputs(const std::vector<at::Tensor>& inputs,
                                        const PackageSpec& spec) {
  if (inputs.size() != spec.inputs.size()) {
    throw RunnerError("wrong number of inputs: the package expects " +
                      std::to_string(spec.inputs.size()) + ", got " +
                      std::to_string(inputs.size()) + ".");
  }
  std::vector<at::Tensor> ready;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    const auto& expected = spec.inputs[i];
    const std::string name = "input[" + std::to_string(i) + "]";
    if (static_cast<size_t>(t.dim()) != expected.dims.size()) {
      throw RunnerError(name + ": expected rank " + std::to_string(expected.dims.size()) + " " +
                        format_shape(expected) + ", got rank " + std::to_string(t.dim()) + " " +
                        format_sizes(t) + ".");
    }
    for (size_t d = 0; d < expected.dims.size(); ++d) {
      const auto size = t.size(static_cast<int64_t>(d));
      const auto& dim = expected.dims[d];
      if (size < dim.min || size > dim.max) {
        const std::string want = dim.is_static()
                                     ? std::to_string(dim.min)
                                     : "a size in [" + std::to_string(dim.min) + ", " +
                                           std::to_string(dim.max) + "]";
        throw RunnerError(name + ": dim " + std::to_string(d) + " expected " + want + ", got " +
                          std::to_string(size) + " (shape " + format_sizes(t) +
                          ", package expects " + format_shape(expected) + ").");
      }
    }
    if (dtype_name(t.scalar_type()) != expected.dtype) {
      throw RunnerError(name + ": expected dtype " + expected.dtype + ", got " +
                        dtype_name(t.scalar_type()) + ". Convert the input or re-export "
                        "the package with --dtype " + dtype_name(t.scalar_type()) + ".");
    }
    const std::string device = t.device().is_cpu() ? "cpu" : t.device().str();
    const bool device_ok = spec.device == "cpu" ? t.device().is_cpu() : t.device().is_cuda();
    if (!device_ok) {
      throw RunnerError(name + ": expected a tensor on " + spec.device + ", got one on " +
                        device + ".");
    }
    if (t.layout() != at::kStrided) {
      throw RunnerError(name + ": expected a dense (strided) tensor, got layout " +
                        c10::str(t.layout()) + ".");
    }
    // AOTI reads inputs as dense row-major buffers: strided inputs would be misread,
    // and lazy negation/conjugation bits must be applied first.
    ready.push_back(t.resolve_conj().resolve_neg().contiguous());
  }
  for (const auto& group : spec.shared_dims) {
    const auto [i0, d0] = group.front();
    const auto size_at = [&](int64_t i, int64_t d) {
      if (i < 0 || static_cast<size_t>(i) >= ready.size() || d < 0 || d >= ready[i].dim()) {
        throw RunnerError("package metadata is malformed: shared dim " + std::to_string(i) + "." +
                          std::to_string(d) + " is not an input dim. Re-export the package.");
      }
      return ready[i].size(d);
    };
    const auto first = size_at(i0, d0);
    for (const auto& [i, d] : group) {
      const auto size = size_at(i, d);
      if (size != first) {
        throw RunnerError("input[" + std::to_string(i) + "]: dim " + std::to_string(d) +
                          " must equal input[" + std::to_string(i0) + "] dim " + std::to_string(d0) +
                          " (the package compiled them as one dynamic size), got " +
                          std::to_string(size) + " and " + std::to_string(first) + ".");
      }
    }
  }
  return ready;
}

std::vector<at::Tensor> run_package(const std::string& path,
                                    const std::vector<at::Tensor>& inputs) {
  try {
    torch::inductor::AOTIModelPackageLoader loader(path, "model");
    return loader.run(inputs);
  } catch (const std::exception& e) {
    rethrow_with_context("running the AOTI package " + path + " failed", e, "");
  }
}

namespace {

// Distance in ULP, element-wise, as double: floats are mapped to integers ordered like
// the values (-0.0 and +0.0 both to 0). Same definition as verify.py's ulp_distance.
at::Tensor ulp_distance(const at::Tensor& actual, const at::Tensor& expected,
                        at::ScalarType int_dtype) {
  if (!at::isFloatingType(expected.scalar_type())) {
    return (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().flatten();
  }
  const int64_t width_bits = 8 * static_cast<int64_t>(expected.element_size());
  const int64_t sign_mask = static_cast<int64_t>((uint64_t{1} << (width_bits - 1)) - 1);
  const auto ordered = [&](const at::Tensor& t) {
    const auto bits = t.view(int_dtype).flatten().to(at::kLong);  // sign-extends
    const auto magnitude = bits.bitwise_and(sign_mask);
    return at::where(bits.lt(0), magnitude.neg(), magnitude);
  };
  const auto a = ordered(actual);
  const auto e = ordered(expected);
  const auto same_sign = a.ge(0).eq(e.ge(0));
  // Opposite signs: |a| + |e| can overflow int64 for float64, so add in double.
  auto distance = at::where(same_sign, (a - e).abs().to(at::kDouble),
                            a.abs().to(at::kDouble) + e.abs().to(at::kDouble));
  const auto a_nan = actual.flatten().isnan();
  const auto e_nan = expected.flatten().isnan();
  distance = at::where(a_nan.logical_and(e_nan), at::zeros_like(distance), distance);
  return at::where(a_nan.logical_xor(e_nan), at::full_like(distance, INFINITY), distance);
}

std::string format_ulp(double value) {
  if (std::isinf(value)) {
    return "inf";
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << value;
  return out.str();
}

}  // namespace

BitReport compare_bits(const at::Tensor& actual_in, const at::Tensor& expected_in) {
  BitReport report;
  const auto actual = actual_in.cpu().resolve_conj().resolve_neg().contiguous();
  const auto expected = expected_in.cpu().resolve_conj().resolve_neg().contiguous();
  report.numel = expected.numel();
  if (actual.scalar_type() != expected.scalar_type()) {
    report.num_differ = report.numel;
    report.detail = "dtype differs: got " + dtype_name(actual.scalar_type()) + ", expected " +
                    dtype_name(expected.scalar_type());
    return report;
  }
  if (actual.sizes() != expected.sizes()) {
    report.num_differ = report.numel;
    report.detail = "shape differs: got " + format_sizes(actual) + ", expected " +
                    format_sizes(expected);
    return report;
  }
  const auto width = static_cast<int64_t>(actual.element_size());
  const auto int_dtype = width == 1 ? at::kByte
                         : width == 2 ? at::kShort
                         : width == 4 ? at::kInt
                                      : at::kLong;
  const auto actual_bits = actual.view(int_dtype).flatten();
  const auto expected_bits = expected.view(int_dtype).flatten();
  const auto differ = actual_bits.ne(expected_bits);
  report.num_differ = differ.sum().item<int64_t>();
  report.identical = report.num_differ == 0;
  if (report.identical) {
    report.detail = "identical";
    return report;
  }
  const int64_t flat = differ.nonzero().flatten()[0].item<int64_t>();
  std::vector<std::string> index;
  int64_t rest = flat;
  for (int64_t d = actual.dim() - 1; d >= 0; --d) {
    index.push_back(std::to_string(rest % actual.size(d)));
    rest /= actual.size(d);
  }
  std::reverse(index.begin(), index.end());
  const auto a = actual.flatten()[flat].to(at::kDouble).item<double>();
  const auto e = expected.flatten()[flat].to(at::kDouble).item<double>();
  const auto a64 = actual.to(at::kDouble).flatten();
  const auto e64 = expected.to(at::kDouble).flatten();
  const auto both_finite = a64.isfinite().logical_and(e64.isfinite());
  const auto abs_diff = at::where(both_finite, (a64 - e64).abs(), at::zeros_like(a64));
  const double max_abs = abs_diff.max().item<double>();
  const auto relative = both_finite.logical_and(e64.ne(0));
  const double max_rel =
      at::where(relative, abs_diff / e64.abs().clamp_min(std::numeric_limits<double>::min()),
                at::zeros_like(a64))
          .max()
          .item<double>();
  report.max_ulp = ulp_distance(actual, expected, int_dtype).max().item<double>();
  std::ostringstream out;
  out << report.num_differ << " of " << report.numel << " elements differ; first at ["
      << join(index, ", ") << "]: got " << format_value(a) << " ("
      << hex_bits(actual_bits[flat], width) << "), expected " << format_value(e) << " ("
      << hex_bits(expected_bits[flat], width) << "); max abs diff " << format_value(max_abs)
      << ", max rel diff " << format_value(max_rel) << ", max ULP distance "
      << format_ulp(*report.max_ulp);
  report.detail = out.str();
  return report;
}

std::vector<std::pair<std::string, std::string>> describe_package(const PackageSpec& spec) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    rows.emplace_back("input[" + std::to_string(i) + "]",
                      format_shape(spec.inputs[i]) + " " + spec.inputs[i].dtype);
  }
  const auto raw = [&](const std::string& key) {
    return spec.raw.count(key) ? spec.raw.at(key) : std::string();
  };
  rows.emplace_back("device", spec.device);
  rows.emplace_back("required ops", join(spec.required_ops, ", "));
  rows.emplace_back("required classes", join(spec.required_classes, ", "));
  rows.emplace_back("op libraries", join(spec.op_libraries, ", "));
  rows.emplace_back("python-only ops",
                    spec.python_only_ops.empty() ? "none" : join(spec.python_only_ops, ", "));
  rows.emplace_back("fake modules", join(spec.fake_modules, ", "));
  std::vector<std::string> groups;
  for (const auto& group : spec.shared_dims) {
    std::vector<std::string> positions;
    for (const auto& [i, d] : group) {
      positions.push_back("input[" + std::to_string(i) + "] dim " + std::to_string(d));
    }
    groups.push_back(join(positions, " = "));
  }
  rows.emplace_back("shared dims", join(groups, "; "));
  rows.emplace_back("optimizations", spec.optimizations);
  rows.emplace_back("identity model", spec.is_identity ? "yes" : "no");
  rows.emplace_back("torch version", spec.torch_version);
  rows.emplace_back("platform", raw("AOTI_PLATFORM") + " " + raw("AOTI_MACHINE"));
  rows.emplace_back("cpu isa", raw("AOTI_CPU_ISA"));
  rows.emplace_back("compute capability", raw("AOTI_COMPUTE_CAPABILITY"));
  return rows;
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
