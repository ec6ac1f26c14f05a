#include "pickle_check.h"

#include <cstdint>
#include <cstring>

namespace aoti_runner {

namespace {

uint64_t little_endian(const unsigned char* p, size_t width) {
  uint64_t value = 0;
  for (size_t i = width; i-- > 0;) {
    value = (value << 8) | p[i];
  }
  return value;
}

}  // namespace

std::string pickle_problem(const char* data, size_t size) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  size_t at = 0;
  uint64_t memo_entries = 0;  // values stored in the memo so far (each PUT stores one)
  while (at < size) {
    const unsigned char op = bytes[at++];
    size_t fixed = 0;       // argument bytes
    size_t length_width = 0;  // width of a length prefix, whose bytes follow it
    switch (op) {
      // No argument.
      case '(': case '0': case '1': case '2': case 'N': case 'Q': case 'R': case 'a': case 'b': case 'd':
      case '}': case 'e': case 'l': case ']': case 'o': case 's': case 't': case ')': case 'u': case 0x81:
      case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8f: case 0x90: case 0x91: case 0x92:
      case 0x93: case 0x94: case 0x97: case 0x98:
        break;
      case '.':  // STOP
        return "";
      // Fixed-size arguments.
      case 'K': case 'h': case 'q': case 0x80: case 0x82: fixed = 1; break;
      case 'M': case 0x83: fixed = 2; break;
      case 'J': case 'j': case 'r': case 0x84: fixed = 4; break;
      case 'G': case 0x95: fixed = 8; break;
      // Length-prefixed arguments.
      case 'U': case 'C': case 0x8c: case 0x8a: length_width = 1; break;
      case 'T': case 'X': case 'B': case 0x8b: length_width = 4; break;
      case 0x8d: case 0x8e: case 0x96: length_width = 8; break;
      // A newline-terminated argument (GLOBAL and INST have two).
      case 'F': case 'I': case 'L': case 'P': case 'S': case 'V': case 'g': case 'p': case 'c': case 'i': {
        for (int line = 0; line < (op == 'c' || op == 'i' ? 2 : 1); ++line) {
          const void* end = std::memchr(bytes + at, '\n', size - at);
          if (end == nullptr) {
            return "an opcode's text argument runs past the end of the pickle";
          }
          at = static_cast<size_t>(static_cast<const unsigned char*>(end) - bytes) + 1;
        }
        continue;
      }
      default:
        return "";  // unknown here: libtorch decides
    }
    if (length_width == 0) {
      if (fixed > size - at) {
        return "an opcode's argument runs past the end of the pickle";
      }
      // BINPUT and LONG_BINPUT: the unpickler grows its memo to the id it is given, so
      // one LONG_BINPUT of 1.3 billion made it allocate 20 GB (fuzz_tensor_file). A
      // pickler numbers its memo entries 0, 1, 2, ... in the order it stores them.
      if (op == 'q' || op == 'r') {
        const uint64_t id = little_endian(bytes + at, fixed);
        if (id > memo_entries) {
          return "an opcode stores memo entry " + std::to_string(id) + ", but only " +
                 std::to_string(memo_entries) + " were stored before it (a pickler numbers them in order)";
        }
        if (id == memo_entries) {
          ++memo_entries;
        }
      }
      at += fixed;
      continue;
    }
    if (length_width > size - at) {
      return "an opcode's length runs past the end of the pickle";
    }
    const uint64_t length = little_endian(bytes + at, length_width);
    at += length_width;
    if (length > size - at) {
      return "an opcode declares " + std::to_string(length) + " bytes, but " + std::to_string(size - at) +
             " follow it in the pickle";
    }
    at += static_cast<size_t>(length);
  }
  return "";
}

}  // namespace aoti_runner
