// OpenSSF Model Signing (OMS), key-pair mode, verified without Python: a Sigstore
// bundle JSON holding a DSSE envelope over an in-toto statement that lists every
// signed file's SHA-256. The model-signing library (package/signing.py) writes and,
// on the Python side, verifies the same files; bundle.cpp decides when to verify.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aoti_runner {

struct SignedFile {
  std::string name;
  std::string sha256;  // hex
};

// What a signature file claims. Only verify_signature's result is to be trusted.
struct SignedManifest {
  std::string key_hint;  // hex SHA-256 of the signing key's PEM (may be empty)
  std::string subject_name;
  std::string subject_sha256;
  std::vector<SignedFile> files;  // in the statement's order
};

// A trusted EC public key (P-256, P-384 or P-521) from a PEM file. Kind "bad_key".
class TrustedKey {
 public:
  static TrustedKey load(const std::string& pem_path);
  const std::string& path() const { return path_; }
  const std::string& hint() const { return hint_; }  // the same hint model-signing records
  int bits() const { return bits_; }
  void* evp_key() const { return key_.get(); }  // EVP_PKEY*

 private:
  std::string path_;
  std::string hint_;
  int bits_ = 0;
  std::shared_ptr<void> key_;
};

// Reads and parses a signature file without checking it (inspect). Kind
// "malformed_signature".
SignedManifest read_signature(const std::string& path);

// The signature file's envelope verified with `key`, then its statement parsed. Kinds
// "malformed_signature", "wrong_key", "bad_signature". `shown` names the file in
// messages (the user's path, not a private copy's).
SignedManifest verify_signature(const std::string& path, const TrustedKey& key,
                                const std::string& shown);

// The files on disk (name -> hex SHA-256, the signature file excluded) must be exactly
// the signed set with the signed digests. Kinds "missing_file", "unknown_file",
// "digest_mismatch" (the first problem's; the message lists every problem). `dir` is
// the folder named in messages.
void check_signed_files(const SignedManifest& manifest,
                        const std::map<std::string, std::string>& on_disk, const std::string& dir);

// The first 16 hex digits and an ellipsis, for messages.
std::string short_digest(const std::string& hex);

}  // namespace aoti_runner
