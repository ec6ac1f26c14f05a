#include "bundle.h"

#include "digest.h"
#include "errors.h"
#include "package_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

namespace aoti_runner {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out.append(out.empty() ? "" : ", ").append(item);
  }
  return out.empty() ? "none" : out;
}

std::string format_megabytes(uint64_t bytes) {
  std::ostringstream text;
  text.setf(std::ios::fixed);
  text.precision(1);
  text << static_cast<double>(bytes) / 1e6 << " MB";
  return text.str();
}

}  // namespace

BundleLayout read_bundle_layout(const std::string& dir) {
  BundleLayout layout;
  layout.dir = dir;
  std::error_code ec;
  // Checked in name order, so both runtimes name the same first bad entry.
  std::vector<fs::directory_entry> entries;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    entries.push_back(entry);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  for (const auto& entry : entries) {
    const auto name = entry.path().filename().string();
    // symlink_status: a link is refused, whatever it points at.
    if (!fs::is_regular_file(entry.symlink_status())) {
      throw RunnerError(dir + "/" + name +
                            ": not a regular file (a symlink, directory or other); a bundle holds "
                            "only regular files",
                        "bundle_layout");
    }
    if (name != kBundlePackage && name != kBundleSignature && !ends_with(name, ".so")) {
      throw RunnerError(dir + "/" + name +
                            ": unexpected file in the bundle; a bundle holds model.pt2, the op "
                            "libraries (.so) its package records, and model.sig",
                        "bundle_layout");
    }
    layout.files.push_back(name);
    if (ends_with(name, ".so")) layout.libraries.push_back(name);
    if (name == kBundleSignature) layout.is_signed = true;
  }
  if (ec) {
    throw RunnerError("could not read the bundle " + dir + ": " + ec.message(), "bundle_layout");
  }
  std::sort(layout.files.begin(), layout.files.end());
  std::sort(layout.libraries.begin(), layout.libraries.end());
  if (std::find(layout.files.begin(), layout.files.end(), kBundlePackage) == layout.files.end()) {
    throw RunnerError(dir + ": not a bundle: no model.pt2 in it", "bundle_layout");
  }
  return layout;
}

std::vector<std::string> bundle_library_names(const PackageSpec& spec, const BundleLayout& layout) {
  std::vector<std::string> recorded;
  for (const auto& library : spec.op_libraries) {
    recorded.push_back(fs::path(library).filename().string());
  }
  for (const auto& name : recorded) {
    if (std::find(layout.libraries.begin(), layout.libraries.end(), name) == layout.libraries.end()) {
      throw RunnerError(layout.dir + ": the package needs " + name +
                            ", which the bundle does not hold; rebuild the bundle with: bundle "
                            "PACKAGE --output DIR --op-lib PATH/" + name,
                        "bundle_layout");
    }
  }
  for (const auto& name : layout.libraries) {
    if (std::find(recorded.begin(), recorded.end(), name) == recorded.end()) {
      throw RunnerError(layout.dir + "/" + name +
                            ": the package does not record this op library (it records: " +
                            join(recorded) + "); remove it or rebuild the bundle",
                        "bundle_layout");
    }
  }
  return recorded;
}

TrustPolicy trust_policy(const std::string& flag_key, bool require_signature) {
  TrustPolicy policy;
  policy.require_signature = require_signature;
  if (!flag_key.empty()) {
    policy.trusted_key = flag_key;
    policy.source = "--trusted-key";
  } else if (const char* env = std::getenv(kTrustedKeyEnv); env != nullptr && *env != '\0') {
    policy.trusted_key = env;
    policy.source = std::string("$") + kTrustedKeyEnv;
  }
  return policy;
}

SealedBundle::SealedBundle(const BundleLayout& layout, Loads loads) {
  for (const auto& name : layout.files) {
    const auto source = layout.dir + "/" + name;
    if (loads == Loads::once && name == kBundlePackage) {
      continue;  // unpack_package, once the signature is checked
    }
    auto file = SealedFile::copy_of(source, name);
    bytes_ += file.size();
    files_.emplace(name, std::move(file));
  }
}

void SealedBundle::unpack_package(const BundleLayout& layout, const SignedManifest& manifest) {
  const auto source = layout.dir + "/" + kBundlePackage;
  try {
    unpacked_ = UnpackedPackage::hashed(source, source);
    bytes_ += unpacked_->size();
  } catch (const RunnerError&) {
    uint64_t size = 0;
    const auto digest = sha256_regular_file(source, size);
    const auto signed_file = std::find_if(manifest.files.begin(), manifest.files.end(),
                                          [](const SignedFile& file) { return file.name == kBundlePackage; });
    if (signed_file != manifest.files.end() && signed_file->sha256 == digest) {
      throw;  // the signed package itself is damaged
    }
    unpack_refused_digest_ = digest;
    bytes_ += size;
  }
}

const SealedFile& SealedBundle::file(const std::string& name) const {
  const auto it = files_.find(name);
  if (it == files_.end()) {
    throw RunnerError("internal error: the sealed bundle has no " + name);
  }
  return it->second;
}

std::map<std::string, std::string> SealedBundle::digests() const {
  std::map<std::string, std::string> digests;
  for (const auto& [name, file] : files_) {
    digests.emplace(name, file.sha256_hex());
  }
  if (unpacked_) {
    digests.emplace(kBundlePackage, unpacked_->sha256_hex());
  } else if (!unpack_refused_digest_.empty()) {
    digests.emplace(kBundlePackage, unpack_refused_digest_);
  }
  return digests;
}

OpenedModel open_model(const std::string& path, const TrustPolicy& policy, Loads loads) {
  OpenedModel model;
  model.origin = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    // A bare package: unsigned by definition.
    if (!policy.trusted_key.empty() || policy.require_signature) {
      if (fs::exists(path, ec)) {
        const auto why = policy.trusted_key.empty()
                             ? std::string("--require-signature is set")
                             : "a trusted key is set (" + policy.source + ")";
        throw RunnerError(path + " is a bare package, and " + why +
                              ", so only a signed bundle may run. Make one: aoti-deploy bundle " + path +
                              " --output DIR --sign-key KEY.pem",
                          "unsigned");
      }
    }
    model.package = path;
    model.package_shown = path;
    model.spec = read_package_spec(path);
    return model;
  }
  model.is_bundle = true;
  const auto layout = read_bundle_layout(path);
  model.is_signed = layout.is_signed;
  const auto signature_shown = path + "/" + kBundleSignature;
  if (policy.trusted_key.empty()) {
    if (policy.require_signature) {
      if (!layout.is_signed) {
        throw RunnerError(path + " is not signed (no model.sig), and --require-signature is set, so "
                                 "it is refused. Sign it: aoti-deploy bundle " + path + " --output " + path +
                              " --sign-key KEY.pem",
                          "unsigned");
      }
      throw RunnerError("--require-signature: " + path +
                            " is signed, but no trusted key is set to verify it with; pass "
                            "--trusted-key PUB.pem or set " + kTrustedKeyEnv,
                        "no_trusted_key");
    }
    model.package = path + "/" + kBundlePackage;
    model.package_shown = model.package;
    model.spec = read_package_spec(model.package);
    std::vector<std::string> paths;
    for (const auto& name : bundle_library_names(model.spec, layout)) {
      paths.push_back(path + "/" + name);
    }
    model.op_libraries = op_library_files(paths);
    if (layout.is_signed) {
      model.status = std::string("signature: not verified (no trusted key; pass --trusted-key "
                                 "PUB.pem or set ") + kTrustedKeyEnv + ")";
    }
    return model;
  }
  if (!layout.is_signed) {
    throw RunnerError(path + " is not signed (no model.sig), and a trusted key is set (" +
                          policy.source + "), so it is refused. Sign it: aoti-deploy bundle " + path +
                          " --output " + path + " --sign-key KEY.pem",
                      "unsigned");
  }
  const auto started = std::chrono::steady_clock::now();
  model.sealed = std::make_shared<SealedBundle>(layout, loads);
  const auto& sealed = *model.sealed;
  const auto key = TrustedKey::load(policy.trusted_key);
  auto manifest = verify_signature(sealed.file(kBundleSignature).path(), key, signature_shown);
  if (loads == Loads::once) {
    model.sealed->unpack_package(layout, manifest);
  }
  auto on_disk = sealed.digests();
  on_disk.erase(kBundleSignature);
  check_signed_files(manifest, on_disk, path);
  model.verify_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  model.verified = true;
  // Everything below reads the bytes that were hashed, never the bundle's files.
  if (sealed.unpacked()) {
    model.unpacked = sealed.unpacked();
    model.package_shown = path + "/" + kBundlePackage + " (verified, unpacked as it was hashed)";
    model.package_sha256 = model.unpacked->sha256_hex();
    model.spec = read_package_spec(model.unpacked->bytes(model.package_shown));
  } else {
    const auto& package = sealed.file(kBundlePackage);
    model.package = package.path();
    model.package_shown = path + "/" + kBundlePackage + " (verified, sealed in memory)";
    model.package_sha256 = package.sha256_hex();
    model.spec = read_package_spec(model.package);
  }
  for (const auto& name : bundle_library_names(model.spec, layout)) {
    const auto& library = sealed.file(name);
    model.op_libraries.push_back(
        {library.path(), name, path + "/" + name + " (verified, sealed in memory)", library.sha256_hex()});
  }
  std::ostringstream status;
  status.setf(std::ios::fixed);
  status.precision(1);
  // The signed files' size, as the Python side reports it.
  const auto signed_bytes = sealed.bytes() - sealed.file(kBundleSignature).size();
  status << "signature: verified " << on_disk.size() << " files (" << format_megabytes(signed_bytes)
         << ") with " << key.path() << " (key hint " << short_digest(key.hint()) << ") in "
         << model.verify_ms << " ms; "
         << (model.unpacked ? "running what was hashed (each file read once: the libraries sealed in memory, the "
                              "package unpacked as it was read)"
                            : "running the sealed copy in memory (each file read once; nothing on disk)");
  model.status = status.str();
  model.signature = std::move(manifest);
  return model;
}

std::vector<std::pair<std::string, std::string>> describe_bundle(const BundleLayout& layout,
                                                                 const std::string& shown,
                                                                 const OpenedModel* verified,
                                                                 const std::string& verified_with) {
  std::vector<std::pair<std::string, std::string>> lines;
  lines.emplace_back("bundle", shown);
  std::optional<SignedManifest> manifest;
  if (!layout.is_signed) {
    lines.emplace_back("signature", "not signed");
  } else {
    try {
      manifest = verified != nullptr && verified->signature ? *verified->signature
                                                            : read_signature(layout.dir + "/" + kBundleSignature);
      lines.emplace_back("signature", std::string(kBundleSignature) + ", key hint " +
                                          manifest->key_hint + ", " +
                                          std::to_string(manifest->files.size()) +
                                          (verified == nullptr
                                               ? std::string(" files (not verified: the runners verify "
                                                             "it with --trusted-key)")
                                               : " files, verified with " + verified_with));
    } catch (const RunnerError& e) {
      lines.emplace_back("signature", e.what());
    }
  }
  std::map<std::string, std::string> signed_files;
  if (manifest) {
    for (const auto& file : manifest->files) signed_files.emplace(file.name, file.sha256);
  }
  const auto sealed = verified != nullptr && verified->sealed ? verified->sealed->digests()
                                                              : std::map<std::string, std::string>{};
  for (const auto& name : layout.files) {
    if (name == kBundleSignature) continue;
    uint64_t bytes = 0;
    const auto it_sealed = sealed.find(name);
    const auto digest = it_sealed != sealed.end() ? it_sealed->second
                                                  : sha256_regular_file(layout.dir + "/" + name, bytes);
    std::string note;
    if (manifest) {
      const auto it = signed_files.find(name);
      note = it == signed_files.end() ? " (not in the signature)"
             : it->second == digest   ? " (as signed)"
                                      : " (differs from the signature)";
    }
    lines.emplace_back("sha256 " + name, digest + note);
  }
  for (const auto& [name, digest] : signed_files) {
    if (std::find(layout.files.begin(), layout.files.end(), name) == layout.files.end()) {
      lines.emplace_back("sha256 " + name, "missing (signed " + digest + ")");
    }
  }
  return lines;
}

}  // namespace aoti_runner
