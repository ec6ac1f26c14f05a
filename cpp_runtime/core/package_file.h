// Package files on disk: the checks before a .pt2 is opened, and its metadata (so
// its spec) read without loading the compiled code. Pairs with
// python/aoti_deploy/package/archive.py.
#pragma once

#include "package_spec.h"

#include <map>
#include <string>

namespace aoti_runner {

// Every metadata entry of the AOTI package at `path`. Throws RunnerError (kinds
// "not_found", "damaged") for a missing, empty, non-zip or non-AOTI file.
std::map<std::string, std::string> read_package_metadata(const std::string& path);

// read_package_metadata, then spec_from_metadata, then check_spec_against_compiled.
PackageSpec read_package_spec(const std::string& path);

// The spec must agree with the compiled model's own input checks (read from the
// generated wrapper source the package carries): each input's dtype and static dims.
// A spec that lies (a dim dynamic that the kernels have static) would let a smaller
// input reach kernels that read past it. Kind "spec_mismatch".
void check_spec_against_compiled(const PackageSpec& spec, const std::string& path);

}  // namespace aoti_runner
