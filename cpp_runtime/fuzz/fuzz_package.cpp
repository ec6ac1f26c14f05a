// Fuzz target: a .pt2 package file as the runners read it before torch's loader sees
// it: the zip structure and entry names, every JSON entry, every shared library's ELF
// headers, the metadata and its spec, and the spec checked against the generated
// wrapper source's own input checks (read_package_spec, the runners' first step).
#include "fuzz_input.h"
#include "package_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aoti_fuzz::MemoryFile file(data, size);
  aoti_fuzz::expect_verdict("read_package_spec", [&] { aoti_runner::read_package_spec(file.path()); });
  return 0;
}
