// Deploy bundles: a folder holding model.pt2, the op libraries its spec records, and
// optionally model.sig (OpenSSF Model Signing). open_model applies the trust policy:
// with a trusted key, each file is read once into sealed memory (a memfd nobody can
// write) and hashed on the way, the signature is checked against those digests, and
// only the sealed bytes are loaded, so nothing native runs before it is checked.
// Pairs with python/aoti_deploy/package/bundle.py and runtime/trust.py.
#pragma once

#include "op_libraries.h"
#include "package_spec.h"
#include "sealed_memory.h"
#include "signature.h"
#include "unpacked_package.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace aoti_runner {

inline constexpr const char* kBundlePackage = "model.pt2";
inline constexpr const char* kBundleSignature = "model.sig";
inline constexpr const char* kTrustedKeyEnv = "AOTI_DEPLOY_TRUSTED_KEY";

// A bundle's files, checked for shape only: regular files named model.pt2, model.sig
// or *.so. Kind "bundle_layout".
struct BundleLayout {
  std::string dir;
  std::vector<std::string> files;  // every file, sorted
  std::vector<std::string> libraries;  // the .so files, sorted
  bool is_signed = false;
};
BundleLayout read_bundle_layout(const std::string& dir);

// The file names of the bundle's op libraries in the order the spec records them (the
// load order). Every recorded library must be there, and nothing else. Kind
// "bundle_layout".
std::vector<std::string> bundle_library_names(const PackageSpec& spec, const BundleLayout& layout);

struct TrustPolicy {
  std::string trusted_key;  // a PEM public key's path; empty: none
  std::string source;       // "--trusted-key" or "$AOTI_DEPLOY_TRUSTED_KEY"
  bool require_signature = false;
};
// The flag's key, else the environment's.
TrustPolicy trust_policy(const std::string& flag_key, bool require_signature);

// How often the runtime builds a loader from what open_model verified.
enum class Loads {
  // Any number of times (a server: a loader per device, a rebuilt one after eviction):
  // the package too is kept in sealed memory.
  many,
  // Once (a runner process): the package is unpacked as it is hashed
  // (UnpackedPackage::hashed), which skips a pass over its bytes.
  once,
};

// A verified bundle's files, each read once (opened without following links, regular
// files only) and hashed on the way: the op libraries and the signature into sealed
// memory (SealedFile), the package too, or, with Loads::once, into its unpacked folder
// (unpack_package, once the signature is known to be good). Sealed memory goes with the
// process, however the process ends; the folder as PrivateFolder says.
class SealedBundle {
 public:
  SealedBundle(const BundleLayout& layout, Loads loads);
  // Loads::once: unpacks the package as it hashes it (UnpackedPackage::hashed). If that
  // fails and the file's digest is not the one `manifest` signs, only the digest is
  // kept, so that the refusal is the signature check's ("digest mismatch"), as in
  // every other runtime; a signed package that fails is refused with the failure.
  void unpack_package(const BundleLayout& layout, const SignedManifest& manifest);
  const SealedFile& file(const std::string& name) const;
  std::map<std::string, std::string> digests() const;  // name -> hex
  uint64_t bytes() const { return bytes_; }
  // With Loads::once: the package, unpacked (else null).
  const std::shared_ptr<UnpackedPackage>& unpacked() const { return unpacked_; }

 private:
  std::map<std::string, SealedFile> files_;
  std::shared_ptr<UnpackedPackage> unpacked_;
  std::string unpack_refused_digest_;  // the package's digest, when it could not be unpacked
  uint64_t bytes_ = 0;
};

// What a runner loads, once the trust policy is met.
struct OpenedModel {
  std::string origin;                      // the path the user gave
  std::string package;                     // the .pt2 to load (a verified bundle's: /proc/self/fd/N, or
                                           // empty when `unpacked` holds it)
  std::string package_shown;               // how messages name it
  std::string package_sha256;              // hex, when known (a verified bundle's); else empty
  std::vector<OpLibraryFile> op_libraries; // a bundle's, in load order; empty otherwise
  PackageSpec spec;
  bool is_bundle = false;
  bool is_signed = false;
  bool verified = false;
  std::optional<SignedManifest> signature;  // set when verified
  std::shared_ptr<SealedBundle> sealed;     // keeps the verified bytes alive
  std::shared_ptr<UnpackedPackage> unpacked;  // Loads::once: the verified package, unpacked; one load takes it
  double verify_ms = 0;
  std::string status;  // a line for the user ("signature: ..."), or empty
};

// A bare package or a bundle, under the policy. Kinds: "unsigned", "no_trusted_key",
// the layout's, the key's, the signature's and the spec reader's.
OpenedModel open_model(const std::string& path, const TrustPolicy& policy, Loads loads = Loads::many);

// inspect's lines for a bundle: its signature and each file's digest against the
// signed one. `shown` names the bundle. With `verified` (the bundle opened under a
// trusted key), the lines are of what was verified and sealed; otherwise the signature
// is only read and the files are hashed.
std::vector<std::pair<std::string, std::string>> describe_bundle(const BundleLayout& layout,
                                                                 const std::string& shown,
                                                                 const OpenedModel* verified = nullptr,
                                                                 const std::string& verified_with = "");

}  // namespace aoti_runner
