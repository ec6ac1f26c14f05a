#include "request_tensors.h"

#include "dtypes.h"
#include "errors.h"
#include "model_config.h"
#include "server_calls.h"
#include "validation.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>
#include <vector>

namespace aoti_triton {

using aoti_runner::RunnerError;

namespace {

c10::Device buffer_device(TRITONSERVER_MemoryType type, int64_t id) {
  if (type == TRITONSERVER_MEMORY_GPU) {
    return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(id));
  }
  return c10::Device(c10::DeviceType::CPU);
}

// One input's bytes, from its buffers in order, into a tensor on `device`.
at::Tensor gather_input(TRITONBACKEND_Input* input, const std::string& name, c10::ScalarType dtype,
                        const std::vector<int64_t>& shape, uint64_t byte_size, uint32_t buffer_count,
                        const c10::Device& device) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const auto needed = aoti_runner::checked_byte_size(shape, c10::elementSize(dtype));
  if (!needed) {
    throw RunnerError(name + ": shape " + aoti_runner::format_sizes(shape) + " of " + aoti_runner::dtype_name(dtype) +
                      " is too large: its element or byte count overflows a 64-bit integer. Send a tensor "
                      "within the model's shape (the config's dims).");
  }
  const auto expected_bytes = static_cast<uint64_t>(*needed);
  if (byte_size != expected_bytes) {
    throw RunnerError(name + ": " + std::to_string(byte_size) + " bytes of data for shape " +
                      aoti_runner::format_sizes(shape) + ", which needs " + std::to_string(expected_bytes) + ".");
  }
  // The buffers are the bytes the server holds for this request: their sizes are
  // summed and checked against the declared byte size before anything is allocated, so
  // a shape within the config (an unbounded dim) cannot make the backend allocate more
  // than the client really sent.
  struct Piece {
    const void* data = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
    int64_t id = 0;
  };
  std::vector<Piece> pieces(buffer_count);
  uint64_t held = 0;
  for (uint32_t b = 0; b < buffer_count; ++b) {
    auto& piece = pieces[b];
    check(TRITONBACKEND_InputBuffer(input, b, &piece.data, &piece.size, &piece.type, &piece.id),
          name + ": reading buffer " + std::to_string(b));
    if (piece.size > byte_size - held) {
      throw RunnerError(name + ": its buffers hold more than the " + std::to_string(byte_size) + " bytes declared.");
    }
    held += piece.size;
  }
  if (held != byte_size) {
    throw RunnerError(name + ": its buffers hold " + std::to_string(held) + " bytes, not the " +
                      std::to_string(byte_size) + " declared.");
  }
  if (buffer_count == 1) {
    const auto& only = pieces[0];
    // Used in place when element-aligned: the compiled kernels load vectors unaligned
    // (the tests send HTTP and gRPC buffers at whatever offset the server got them).
    if (buffer_device(only.type, only.id) == device &&
        reinterpret_cast<uintptr_t>(only.data) % c10::elementSize(dtype) == 0) {
      return at::from_blob(const_cast<void*>(only.data), shape, options);
    }
  }
  auto tensor = at::empty(shape, options);
  auto bytes = tensor.view({-1}).view(at::kByte);
  uint64_t offset = 0;
  for (const auto& piece : pieces) {
    if (piece.size == 0) {
      continue;
    }
    const auto source = at::from_blob(const_cast<void*>(piece.data), {static_cast<int64_t>(piece.size)},
                                      at::TensorOptions().dtype(at::kByte).device(buffer_device(piece.type, piece.id)));
    bytes.narrow(0, static_cast<int64_t>(offset), static_cast<int64_t>(piece.size)).copy_(source);
    offset += piece.size;
  }
  return tensor;
}

}  // namespace

std::vector<at::Tensor> read_request_inputs(TRITONBACKEND_Request* request, const aoti_runner::PackageSpec& spec,
                                            const c10::Device& device) {
  uint32_t given = 0;
  check(TRITONBACKEND_RequestInputCount(request, &given), "reading the request's inputs");
  const auto expected_names = served_names(spec.inputs, spec.inputs.size(), kInputPrefix);
  if (given != spec.inputs.size()) {
    throw RunnerError("the model takes " + std::to_string(spec.inputs.size()) + " input(s) (" + expected_names +
                      "), the request has " + std::to_string(given) + ".");
  }
  struct Given {
    TRITONBACKEND_Input* input = nullptr;
    std::string name;
    uint64_t byte_size = 0;
    uint32_t buffer_count = 0;
  };
  std::vector<Given> handles(spec.inputs.size());
  std::vector<aoti_runner::InputDesc> descs(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    auto& handle = handles[i];
    handle.name = served_name(spec.inputs, i, kInputPrefix);
    if (auto* error = TRITONBACKEND_RequestInput(request, handle.name.c_str(), &handle.input)) {
      TRITONSERVER_ErrorDelete(error);
      throw RunnerError("the request has no input " + handle.name + " (input[" + std::to_string(i) +
                        "] of the package, whose inputs are " + expected_names + ").");
    }
    TRITONSERVER_DataType type = TRITONSERVER_TYPE_INVALID;
    const int64_t* shape = nullptr;
    uint32_t dims = 0;
    const char* name = nullptr;
    check(TRITONBACKEND_InputProperties(handle.input, &name, &type, &shape, &dims, &handle.byte_size,
                                        &handle.buffer_count),
          handle.name + ": reading its properties");
    auto dtype = dtype_of(type);
    descs[i].dtype = dtype.empty() ? "a Triton type no package takes (" + std::to_string(type) + ")" : dtype;
    descs[i].shape.assign(shape, shape + dims);
    descs[i].device = spec.device;  // copied to the package's device below
  }
  // The core names inputs by position, and by name when the spec records names (the
  // request's names then); else the request's INPUT__i is the core's input[i].
  const std::string unnamed_hint = aoti_runner::tensor_names(spec.inputs).empty()
                                       ? std::string(" (the request's ") + kInputPrefix + "i is the package's input[i])"
                                       : std::string();
  try {
    aoti_runner::check_inputs(descs, spec);
  } catch (const RunnerError& e) {
    throw RunnerError(std::string(e.what()) + unnamed_hint, e.kind());
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const auto dtype = *aoti_runner::dtype_from_name(descs[i].dtype);
    tensors.push_back(gather_input(handles[i].input, handles[i].name, dtype, descs[i].shape, handles[i].byte_size,
                                   handles[i].buffer_count, device));
    // A bool is one byte holding 0 or 1; any other byte is undefined to the kernels.
    if (dtype == at::kBool && tensors.back().numel() > 0 && tensors.back().view(at::kByte).gt(1).any().item<bool>()) {
      throw RunnerError(handles[i].name + ": a BOOL input must hold bytes 0 or 1, got other values.");
    }
    // An index out of range would abort the whole server from the compiled kernel's
    // OpenMP region: this request is refused instead, alone.
    try {
      aoti_runner::check_input_values(i, tensors.back(), spec);
    } catch (const RunnerError& e) {
      throw RunnerError(std::string(e.what()) + unnamed_hint, e.kind());
    }
  }
  return tensors;
}

void write_response_outputs(TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
                            const aoti_runner::PackageSpec& spec, const std::vector<at::Tensor>& outputs,
                            bool batched, int64_t first, int64_t count) {
  uint32_t requested = 0;
  check(TRITONBACKEND_RequestOutputCount(request, &requested), "reading the requested outputs");
  for (uint32_t r = 0; r < requested; ++r) {
    const char* name = nullptr;
    check(TRITONBACKEND_RequestOutputName(request, r, &name), "reading a requested output's name");
    const std::string wanted = name;
    size_t index = outputs.size();
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (wanted == served_name(spec.outputs, k, kOutputPrefix)) {
        index = k;
      }
    }
    if (index == outputs.size()) {
      throw RunnerError("the request asks for output '" + wanted + "', but the package returns " +
                        std::to_string(outputs.size()) + " (" +
                        served_names(spec.outputs, outputs.size(), kOutputPrefix) + ").");
    }
    auto piece = batched ? outputs[index].narrow(0, first, count) : outputs[index];
    const auto type = server_type_of(aoti_runner::dtype_name(piece.scalar_type()));
    if (type == TRITONSERVER_TYPE_INVALID) {
      throw RunnerError(wanted + ": the package returned " + aoti_runner::dtype_name(piece.scalar_type()) +
                        ", which Triton has no type for.");
    }
    // A Python scalar output (0-d in the package) is answered as a one-element tensor,
    // as its config declares it (dims [1]).
    const bool scalar = index < spec.outputs.size() && spec.outputs[index].is_scalar() && piece.numel() == 1;
    const auto shape = scalar ? std::vector<int64_t>{1} : piece.sizes().vec();
    TRITONBACKEND_Output* output = nullptr;
    check(TRITONBACKEND_ResponseOutput(response, &output, name, type, shape.data(), static_cast<uint32_t>(shape.size())),
          wanted + ": adding it to the response");
    const auto bytes = static_cast<uint64_t>(piece.numel()) * piece.element_size();
    void* buffer = nullptr;
    auto memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    check(TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id), wanted + ": getting its buffer");
    if (bytes == 0) {
      continue;
    }
    const auto device = buffer_device(memory, memory_id);
    if (device.is_cpu() && piece.device().is_cpu()) {
      const auto dense = piece.contiguous();
      std::memcpy(buffer, dense.data_ptr(), bytes);
    } else {
      at::from_blob(buffer, shape, at::TensorOptions().dtype(piece.scalar_type()).device(device)).copy_(piece);
    }
  }
}

}  // namespace aoti_triton
