// Fuzz target: a Triton request's inputs as the aoti backend reads them, through the
// backend's own read_request_inputs (triton/request_tensors.cpp): input count and
// names, datatypes, shapes, declared byte sizes, buffer counts, each buffer's size,
// memory type and alignment, then the runner core's checks against the package spec.
// The TRITONBACKEND_* functions it calls are defined below over a request decoded from
// the fuzz input: the backend leaves them undefined for the server process, and here
// this file is that server. Every tensor it returns is read in full, so a tensor over
// too few bytes is an ASan report.
//
// Input layout (every field little-endian; a short input reads as zeros):
//   u8 spec (one of kSpecs), u8 input count (mod 5), then per input:
//     u8 name (mod 4: 3 = the next input's name, else its own), u8 datatype (mod 16),
//     u8 rank (mod 7), per dim u8 (< 0xF0: that size, else an i64 follows),
//     u8 byte size mode (mod 3: 0 exact, 1 exact + i8, 2 a u64 follows),
//     u8 buffer count (mod 5), per buffer: u8 memory type (mod 4), u8 misalignment
//     (mod 8), u8 share (0xFF: a u32 size follows, else that share of what is left);
//   the remaining bytes fill the buffers, repeated.
#include "errors.h"
#include "package_spec.h"
#include "request_tensors.h"
#include "triton_api.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

// --- the server side, as much as read_request_inputs calls -----------------------
struct TRITONSERVER_Error {
  TRITONSERVER_Error_Code code;
  std::string message;
};

namespace {

struct FakeBuffer {
  std::vector<uint8_t> storage;  // misalignment bytes, then the buffer
  size_t misalign = 0;
  TRITONSERVER_MemoryType type = TRITONSERVER_MEMORY_CPU;
};

struct FakeInput {
  std::string name;
  TRITONSERVER_DataType datatype = TRITONSERVER_TYPE_INVALID;
  std::vector<int64_t> shape;
  uint64_t byte_size = 0;
  std::vector<FakeBuffer> buffers;
};

struct FakeRequest {
  std::vector<FakeInput> inputs;
};

FakeRequest& request_of(TRITONBACKEND_Request* request) {
  return *reinterpret_cast<FakeRequest*>(request);
}
FakeInput& input_of(TRITONBACKEND_Input* input) {
  return *reinterpret_cast<FakeInput*>(input);
}
TRITONSERVER_Error* error(TRITONSERVER_Error_Code code, const std::string& message) {
  return new TRITONSERVER_Error{code, message};
}

}  // namespace

extern "C" {

TRITONSERVER_Error* TRITONSERVER_ErrorNew(TRITONSERVER_Error_Code code, const char* msg) {
  return error(code, msg);
}
void TRITONSERVER_ErrorDelete(TRITONSERVER_Error* e) {
  delete e;
}
const char* TRITONSERVER_ErrorMessage(TRITONSERVER_Error* e) {
  return e->message.c_str();
}
TRITONSERVER_Error* TRITONSERVER_LogMessage(TRITONSERVER_LogLevel, const char*, const int, const char*) {
  return nullptr;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInputCount(TRITONBACKEND_Request* request, uint32_t* count) {
  *count = static_cast<uint32_t>(request_of(request).inputs.size());
  return nullptr;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInputName(TRITONBACKEND_Request* request, const uint32_t index,
                                                   const char** name) {
  auto& inputs = request_of(request).inputs;
  if (index >= inputs.size()) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "input index out of range");
  }
  *name = inputs[index].name.c_str();
  return nullptr;
}
TRITONSERVER_Error* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name,
                                               TRITONBACKEND_Input** input) {
  // Triton finds an input by name; the first of two with one name, as a map would.
  for (auto& candidate : request_of(request).inputs) {
    if (candidate.name == name) {
      *input = reinterpret_cast<TRITONBACKEND_Input*>(&candidate);
      return nullptr;
    }
  }
  return error(TRITONSERVER_ERROR_INVALID_ARG, std::string("unknown input ") + name);
}
TRITONSERVER_Error* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name,
                                                  TRITONSERVER_DataType* datatype, const int64_t** shape,
                                                  uint32_t* dims_count, uint64_t* byte_size,
                                                  uint32_t* buffer_count) {
  auto& in = input_of(input);
  if (name) *name = in.name.c_str();
  if (datatype) *datatype = in.datatype;
  if (shape) *shape = in.shape.data();
  if (dims_count) *dims_count = static_cast<uint32_t>(in.shape.size());
  if (byte_size) *byte_size = in.byte_size;
  if (buffer_count) *buffer_count = static_cast<uint32_t>(in.buffers.size());
  return nullptr;
}
TRITONSERVER_Error* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, const uint32_t index, const void** buffer,
                                              uint64_t* buffer_byte_size, TRITONSERVER_MemoryType* memory_type,
                                              int64_t* memory_type_id) {
  auto& in = input_of(input);
  if (index >= in.buffers.size()) {
    return error(TRITONSERVER_ERROR_INVALID_ARG, "buffer index out of range");
  }
  auto& b = in.buffers[index];
  *buffer = b.storage.data() + b.misalign;
  *buffer_byte_size = b.storage.size() - b.misalign;
  *memory_type = b.type;
  *memory_type_id = 0;
  return nullptr;
}

// The response side (write_response_outputs, in the same file) is not fuzzed here.
TRITONSERVER_Error* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request*, uint32_t* count) {
  *count = 0;
  return nullptr;
}
TRITONSERVER_Error* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request*, const uint32_t, const char**) {
  return error(TRITONSERVER_ERROR_UNSUPPORTED, "no outputs in this target");
}
TRITONSERVER_Error* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response*, TRITONBACKEND_Output**, const char*,
                                                 const TRITONSERVER_DataType, const int64_t*, const uint32_t) {
  return error(TRITONSERVER_ERROR_UNSUPPORTED, "no outputs in this target");
}
TRITONSERVER_Error* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output*, void**, const uint64_t, TRITONSERVER_MemoryType*,
                                               int64_t*) {
  return error(TRITONSERVER_ERROR_UNSUPPORTED, "no outputs in this target");
}

}  // extern "C"

// --- the request, decoded from the fuzz input ------------------------------------
namespace {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  template <class T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - position_);
    std::memcpy(&value, data_ + position_, n);
    position_ += n;
    return value;
  }
  // What the structure did not use: the buffers' contents.
  const uint8_t* rest(size_t& n) const {
    n = size_ - position_;
    return data_ + position_;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// Buffers larger than this are not made (the declared byte size may still be anything):
// larger than every shape the specs below take, except the unbounded dim's.
constexpr uint64_t kMaxBuffer = 256u << 10;

// Specs of real packages' shapes: the demo model, dynamic dims (one unbounded),
// indices with a value range beside a bool mask sharing a dim, scalars and empty
// dims, and every other dtype Triton maps.
const char* const kSpecs[] = {
    R"({"schema_version": 2, "inputs": [{"dtype": "float32", "dims": [{"min": 2, "max": 2}, {"min": 3, "max": 3},
        {"min": 8, "max": 8}, {"min": 12, "max": 12}]}], "device": "cpu", "torch_version": "2.13.0"})",
    R"({"schema_version": 3, "inputs": [{"dtype": "float32", "dims": [{"min": 1, "max": 8}, {"min": 3, "max": 3},
        {"min": 1, "max": null}, {"min": 4, "max": 16}]}], "device": "cpu", "torch_version": "2.13.0"})",
    R"({"schema_version": 2, "inputs": [
        {"dtype": "int64", "dims": [{"min": 1, "max": 4}, {"min": 1, "max": 16}],
         "values": {"min": 0, "max": 999, "why": "indexes an embedding of 1000 rows"}},
        {"dtype": "bool", "dims": [{"min": 1, "max": 4}, {"min": 1, "max": 16}]}],
        "shared_dims": [[[0, 0], [1, 0]], [[0, 1], [1, 1]]], "device": "cpu", "torch_version": "2.13.0"})",
    R"({"schema_version": 2, "inputs": [{"dtype": "float16", "dims": []},
        {"dtype": "bfloat16", "dims": [{"min": 0, "max": 4}]}], "device": "cpu", "torch_version": "2.13.0"})",
    R"({"schema_version": 2, "inputs": [{"dtype": "uint8", "dims": [{"min": 2, "max": 2}, {"min": 2, "max": 2}]},
        {"dtype": "int32", "dims": [{"min": 3, "max": 3}], "values": {"min": -5, "max": 5, "why": "an offset"}},
        {"dtype": "float64", "dims": [{"min": 1, "max": 1}]}, {"dtype": "int8", "dims": [{"min": 1, "max": 2}]},
        {"dtype": "int16", "dims": [{"min": 1, "max": 2}]}], "device": "cpu", "torch_version": "2.13.0"})",
};
constexpr size_t kSpecCount = sizeof(kSpecs) / sizeof(kSpecs[0]);

const std::vector<aoti_runner::PackageSpec>& specs() {
  static const auto parsed = [] {
    std::vector<aoti_runner::PackageSpec> out;
    for (const auto* text : kSpecs) {
      out.push_back(aoti_runner::parse_spec_document(nlohmann::json::parse(text)));
    }
    return out;
  }();
  return parsed;
}

uint64_t element_size(TRITONSERVER_DataType type) {
  switch (type) {
    case TRITONSERVER_TYPE_BOOL: case TRITONSERVER_TYPE_UINT8: case TRITONSERVER_TYPE_INT8: return 1;
    case TRITONSERVER_TYPE_UINT16: case TRITONSERVER_TYPE_INT16: case TRITONSERVER_TYPE_FP16:
    case TRITONSERVER_TYPE_BF16: return 2;
    case TRITONSERVER_TYPE_UINT32: case TRITONSERVER_TYPE_INT32: case TRITONSERVER_TYPE_FP32: return 4;
    case TRITONSERVER_TYPE_UINT64: case TRITONSERVER_TYPE_INT64: case TRITONSERVER_TYPE_FP64: return 8;
    default: return 1;
  }
}

FakeRequest decode(Reader& in) {
  FakeRequest request;
  const uint32_t count = in.take<uint8_t>() % 5;
  for (uint32_t i = 0; i < count; ++i) {
    FakeInput input;
    input.name = std::string("INPUT__") + std::to_string(i + (in.take<uint8_t>() % 4 == 3 ? 1 : 0));
    input.datatype = static_cast<TRITONSERVER_DataType>(in.take<uint8_t>() % 16);
    const uint32_t rank = in.take<uint8_t>() % 7;
    uint64_t elements = 1;  // wraps like an unchecked client's arithmetic
    for (uint32_t d = 0; d < rank; ++d) {
      const auto tag = in.take<uint8_t>();
      input.shape.push_back(tag < 0xF0 ? tag : in.take<int64_t>());
      elements *= static_cast<uint64_t>(input.shape.back());
    }
    const uint64_t exact = elements * element_size(input.datatype);
    switch (in.take<uint8_t>() % 3) {
      case 0: input.byte_size = exact; break;
      case 1: input.byte_size = exact + static_cast<uint64_t>(static_cast<int64_t>(in.take<int8_t>())); break;
      default: input.byte_size = in.take<uint64_t>(); break;
    }
    const uint32_t buffers = in.take<uint8_t>() % 5;
    uint64_t left = input.byte_size;
    for (uint32_t b = 0; b < buffers; ++b) {
      FakeBuffer buffer;
      buffer.type = static_cast<TRITONSERVER_MemoryType>(in.take<uint8_t>() % 4);
      buffer.misalign = in.take<uint8_t>() % 8;
      const auto share = in.take<uint8_t>();
      uint64_t size = 0;
      if (share == 0xFF) {
        size = in.take<uint32_t>();
      } else {
        size = b + 1 == buffers ? left : left / 254 * share;
      }
      size = std::min(size, kMaxBuffer);
      left -= std::min(left, size);
      buffer.storage.resize(buffer.misalign + size);
      input.buffers.push_back(std::move(buffer));
    }
    request.inputs.push_back(std::move(input));
  }
  size_t fill_size = 0;
  const auto* fill = in.rest(fill_size);
  size_t at = 0;
  for (auto& input : request.inputs) {
    for (auto& buffer : input.buffers) {
      for (size_t k = buffer.misalign; k < buffer.storage.size() && fill_size > 0;) {
        const size_t n = std::min(buffer.storage.size() - k, fill_size - at);
        std::memcpy(buffer.storage.data() + k, fill + at, n);
        k += n;
        at = (at + n) % fill_size;
      }
    }
  }
  return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  const auto& spec = specs()[in.take<uint8_t>() % kSpecCount];
  auto request = decode(in);
  try {
    const auto tensors = aoti_triton::read_request_inputs(reinterpret_cast<TRITONBACKEND_Request*>(&request), spec,
                                                          c10::Device(c10::kCPU));
    if (tensors.size() != spec.inputs.size()) {
      std::fprintf(stderr, "read_request_inputs returned %zu tensors for %zu inputs\n", tensors.size(),
                   spec.inputs.size());
      std::abort();
    }
    volatile int64_t sum = 0;
    for (const auto& t : tensors) {
      if (t.numel() > 0) {
        sum = sum + t.contiguous().view({-1}).view(at::kByte).sum().item<int64_t>();
      }
    }
  } catch (const aoti_runner::RunnerError&) {
  } catch (const c10::Error& e) {
    // Only a GPU buffer may fail in torch (no CUDA in this process); the backend turns
    // that into the request's error too, but nothing else should reach torch unchecked.
    bool gpu = false;
    for (const auto& input : request.inputs) {
      for (const auto& buffer : input.buffers) {
        gpu = gpu || buffer.type == TRITONSERVER_MEMORY_GPU;
      }
    }
    if (!gpu) {
      std::fprintf(stderr, "read_request_inputs let torch throw: %s\n", e.what_without_backtrace());
      std::abort();
    }
  }
  return 0;
}
