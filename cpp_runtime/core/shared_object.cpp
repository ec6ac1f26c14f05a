#include "shared_object.h"

#include "errors.h"

#include <elf.h>

#include <fstream>
#include <vector>

namespace aoti_runner {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kThisMachine = EM_X86_64;
constexpr const char* kThisMachineName = "x86_64";
#elif defined(__aarch64__)
constexpr uint16_t kThisMachine = EM_AARCH64;
constexpr const char* kThisMachineName = "aarch64";
#else
#error "add this machine's ELF e_machine"
#endif

bool fits(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

}  // namespace

void check_shared_object(uint64_t size, const ReadAt& read, const std::string& what, const std::string& fix) {
  const auto fail = [&](const std::string& why) {
    throw RunnerError(what + " is not a complete shared library for this machine: " + why + ". " + fix, "damaged");
  };
  Elf64_Ehdr header{};
  if (size < sizeof(header)) {
    fail("it is " + std::to_string(size) + " bytes long, shorter than an ELF header");
  }
  read(0, &header, sizeof(header));
  if (header.e_ident[EI_MAG0] != ELFMAG0 || header.e_ident[EI_MAG1] != ELFMAG1 ||
      header.e_ident[EI_MAG2] != ELFMAG2 || header.e_ident[EI_MAG3] != ELFMAG3) {
    fail("it does not start with the ELF magic number");
  }
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    fail("it is not a 64-bit little-endian ELF file");
  }
  if (header.e_type != ET_DYN) {
    fail("it is an ELF file of type " + std::to_string(header.e_type) + ", not a shared object");
  }
  if (header.e_machine != kThisMachine) {
    fail("it is built for ELF machine " + std::to_string(header.e_machine) + ", not " + kThisMachineName);
  }
  if (header.e_phnum == 0 || header.e_phentsize != sizeof(Elf64_Phdr) ||
      !fits(header.e_phoff, static_cast<uint64_t>(header.e_phnum) * sizeof(Elf64_Phdr), size)) {
    fail("its program headers lie outside the file (" + std::to_string(size) + " bytes)");
  }
  std::vector<Elf64_Phdr> segments(header.e_phnum);
  read(header.e_phoff, segments.data(), segments.size() * sizeof(Elf64_Phdr));
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!fits(segments[i].p_offset, segments[i].p_filesz, size)) {
      fail("segment " + std::to_string(i) + " needs bytes " + std::to_string(segments[i].p_offset) + "+" +
           std::to_string(segments[i].p_filesz) + ", past the end of the file (" + std::to_string(size) +
           " bytes; a truncated file?)");
    }
  }
  if (header.e_shnum == 0) {
    return;
  }
  if (header.e_shentsize != sizeof(Elf64_Shdr) ||
      !fits(header.e_shoff, static_cast<uint64_t>(header.e_shnum) * sizeof(Elf64_Shdr), size)) {
    fail("its section headers lie outside the file (" + std::to_string(size) + " bytes; a truncated file?)");
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  read(header.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr));
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].sh_type != SHT_NOBITS && !fits(sections[i].sh_offset, sections[i].sh_size, size)) {
      fail("section " + std::to_string(i) + " lies past the end of the file (a truncated file?)");
    }
  }
}

void check_shared_object_file(const std::string& path, const std::string& what, const std::string& fix) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw RunnerError("could not open " + path + ".", "not_found");
  }
  file.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(file.tellg());
  check_shared_object(
      size,
      [&](uint64_t offset, void* out, size_t n) {
        file.seekg(static_cast<std::streamoff>(offset));
        file.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
        if (static_cast<size_t>(file.gcount()) != n) {
          throw RunnerError("could not read " + path + " (it changed while being read?).", "damaged");
        }
      },
      what, fix);
}

}  // namespace aoti_runner
