// Fuzz target: OpenSSF Model Signing signature files and the manifest they sign (the
// in-toto statement listing every file's SHA-256), as a bundle's model.sig is read.
// The first byte picks what the rest is:
//   even: a whole signature file, read (inspect) and verified with a fixed key;
//   odd:  an in-toto statement, which this target wraps in a DSSE envelope and signs
//         with that key, so the statement parser is reached through verification too.
// A manifest that parses is then checked against files on disk that differ from it.
#include "fuzz_input.h"
#include "signature.h"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

namespace {

using namespace aoti_runner;

struct SigningKey {
  EVP_PKEY* private_key = nullptr;
  std::unique_ptr<aoti_fuzz::MemoryFile> public_pem;
  std::unique_ptr<TrustedKey> trusted;
};

// A P-256 key made for this process: nothing secret is kept in the repository.
const SigningKey& signing_key() {
  static const SigningKey key = [] {
    SigningKey k;
    k.private_key = EVP_EC_gen("P-256");
    std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
    char* pem = nullptr;
    if (k.private_key == nullptr || !out || PEM_write_bio_PUBKEY(out.get(), k.private_key) != 1) {
      std::fprintf(stderr, "could not make the fuzzer's signing key\n");
      std::abort();
    }
    const long size = BIO_get_mem_data(out.get(), &pem);
    k.public_pem = std::make_unique<aoti_fuzz::MemoryFile>(reinterpret_cast<const uint8_t*>(pem),
                                                           static_cast<size_t>(size));
    k.trusted = std::make_unique<TrustedKey>(TrustedKey::load(k.public_pem->path()));
    return k;
  }();
  return key;
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// The signature file model-signing would write for this statement.
std::string signed_envelope(const std::string& statement) {
  const std::string type = "application/vnd.in-toto+json";
  const std::string pae = "DSSEv1 " + std::to_string(type.size()) + " " + type + " " +
                          std::to_string(statement.size()) + " " + statement;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t length = 0;
  std::string signature;
  if (!context ||
      EVP_DigestSignInit(context.get(), nullptr, EVP_sha256(), nullptr, signing_key().private_key) != 1 ||
      EVP_DigestSign(context.get(), nullptr, &length, reinterpret_cast<const unsigned char*>(pae.data()),
                     pae.size()) != 1) {
    std::abort();
  }
  signature.resize(length);
  if (EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(signature.data()), &length,
                     reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) != 1) {
    std::abort();
  }
  signature.resize(length);
  nlohmann::json document = {
      {"mediaType", "application/vnd.dev.sigstore.bundle.v0.3+json"},
      {"verificationMaterial", {{"publicKey", {{"hint", signing_key().trusted->hint()}}}}},
      {"dsseEnvelope",
       {{"payload", base64(statement)}, {"payloadType", type}, {"signatures", {{{"sig", base64(signature)}}}}}}};
  return document.dump();
}

// Files on disk that differ from the manifest in every way check_signed_files names.
void check_against_disk(const SignedManifest& manifest) {
  std::map<std::string, std::string> on_disk;
  for (const auto& file : manifest.files) {
    on_disk[file.name] = file.sha256;
  }
  aoti_fuzz::expect_verdict("check_signed_files (same)", [&] { check_signed_files(manifest, on_disk, "bundle"); });
  if (!on_disk.empty()) {
    on_disk.begin()->second = std::string(64, '0');
    on_disk.erase(std::prev(on_disk.end()));
  }
  on_disk["extra.so"] = std::string(64, 'f');
  aoti_fuzz::expect_verdict("check_signed_files", [&] { check_signed_files(manifest, on_disk, "bundle"); });
  short_digest(manifest.subject_sha256);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const auto& key = *signing_key().trusted;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string file_text = (data[0] & 1) ? signed_envelope(rest) : rest;
  aoti_fuzz::MemoryFile file(reinterpret_cast<const uint8_t*>(file_text.data()), file_text.size());
  aoti_fuzz::expect_verdict("read_signature", [&] { check_against_disk(read_signature(file.path())); });
  aoti_fuzz::expect_verdict("verify_signature", [&] {
    check_against_disk(verify_signature(file.path(), key, "model.sig"));
  });
  return 0;
}
