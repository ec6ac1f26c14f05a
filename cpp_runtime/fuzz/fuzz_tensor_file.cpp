// Fuzz target: tensor files (torch.save's zip + pickle), read as aoti_runner reads
// --inputs and --expected. Every element of every tensor that load_tensors returns is
// read, so a view reaching past the bytes the file holds is an ASan report, not a
// silent read.
#include "fuzz_input.h"
#include "tensor_files.h"

#include <ATen/ATen.h>

namespace {

// Small enough that a crafted file (e.g. stride 0 over huge sizes) cannot exhaust
// memory through the copy below; such a tensor is still read at its last element.
constexpr int64_t kMaxCopiedBytes = 1 << 20;

uint64_t touch(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0;
  }
  if (static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size()) <= kMaxCopiedBytes) {
    const auto bytes = t.contiguous().view({-1}).view(at::kByte);
    return static_cast<uint64_t>(bytes.sum().item<int64_t>());
  }
  // Only the first and the last element: the bounds the reader checked.
  std::vector<int64_t> last;
  for (const auto size : t.sizes()) {
    last.push_back(size - 1);
  }
  const auto* base = static_cast<const uint8_t*>(t.storage().data()) + t.storage_offset() * t.element_size();
  int64_t offset = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    offset += last[static_cast<size_t>(d)] * t.stride(d);
  }
  volatile uint8_t first_byte = base[0];
  volatile uint8_t last_byte = base[offset * t.element_size() + t.element_size() - 1];
  return first_byte + last_byte;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aoti_fuzz::MemoryFile file(data, size);
  aoti_fuzz::expect_verdict("load_tensors", [&] {
    volatile uint64_t sum = 0;
    for (const auto& t : aoti_runner::load_tensors(file.path())) {
      sum = sum + touch(t);
    }
  });
  return 0;
}
