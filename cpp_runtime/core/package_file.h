// Package files on disk: the checks before a .pt2 is opened, and its metadata (so
// its spec) read without loading the compiled code. Pairs with
// python/aoti_deploy/package/archive.py.
#pragma once

#include "package_spec.h"
#include "zip_archive.h"

#include <map>
#include <string>

namespace aoti_runner {

// Every metadata entry of the AOTI package at `path`. Throws RunnerError (kinds
// "not_found", "damaged") for a missing, empty, non-zip or non-AOTI file.
std::map<std::string, std::string> read_package_metadata(const std::string& path);

// read_package_metadata, then spec_from_metadata, then check_spec_against_compiled.
PackageSpec read_package_spec(const std::string& path);

// A package's bytes as the readers above see them: its size and a reader of any range
// inside it, from a file, or from what a verified load hashed (unpacked_package.h).
// `shown` names it in messages.
struct PackageBytes {
  uint64_t size = 0;
  ReadAt read;
  std::string shown;
};
// The file at `path`, read with pread (kind "not_found" when it cannot be opened).
PackageBytes package_file_bytes(const std::string& path);
// read_package_spec over bytes already checked to be a zip of some size (no "is it a
// file, is it empty, is it ONNX" messages: those are about paths).
PackageSpec read_package_spec(const PackageBytes& package);

// The spec must agree with the compiled model's own input checks (read from the
// generated wrapper source the package carries): each input's dtype and static dims.
// A spec that lies (a dim dynamic that the kernels have static) would let a smaller
// input reach kernels that read past it. Kind "spec_mismatch".
void check_spec_against_compiled(const PackageSpec& spec, const PackageBytes& package);

}  // namespace aoti_runner
