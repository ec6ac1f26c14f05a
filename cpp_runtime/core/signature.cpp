#include "signature.h"

#include "digest.h"
#include "errors.h"

#include "json_text.h"

#include <nlohmann/json.hpp>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/core_names.h>
#include <openssl/pem.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>

namespace aoti_runner {
namespace {

using nlohmann::json;

constexpr const char* kBundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json";
constexpr const char* kPayloadType = "application/vnd.in-toto+json";
constexpr const char* kStatementType = "https://in-toto.io/Statement/v1";
constexpr const char* kPredicateType = "https://model_signing/signature/v1.0";
// Far above any real signature (a few KB per hundred files); refuses a huge file
// before reading it.
constexpr std::uintmax_t kMaxSignatureBytes = 16u << 20;

[[noreturn]] void malformed(const std::string& shown, const std::string& detail) {
  std::string message = shown;
  message.append(": malformed signature: ").append(detail);
  message.append(
      ". Expected an OpenSSF Model Signing signature (a Sigstore bundle JSON); sign the bundle "
      "again (aoti-deploy bundle PACKAGE --output DIR --sign-key KEY.pem)");
  throw RunnerError(message, "malformed_signature");
}

std::string read_small_file(const std::string& path, const std::string& shown) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    malformed(shown, "cannot read it (" + ec.message() + ")");
  }
  if (size > kMaxSignatureBytes) {
    malformed(shown, "it is " + std::to_string(size) + " bytes, more than any signature (16 MB)");
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file) {
    malformed(shown, "cannot read it");
  }
  return text.str();
}

const json& member(const json& object, const char* key, const std::string& where,
                   const std::string& shown) {
  if (!object.is_object() || !object.contains(key)) {
    malformed(shown, "no " + where + key);
  }
  return object.at(key);
}

std::string string_member(const json& object, const char* key, const std::string& where,
                          const std::string& shown) {
  const auto& value = member(object, key, where, shown);
  if (!value.is_string()) {
    malformed(shown, where + key + " is not a string");
  }
  return value.get<std::string>();
}

std::string base64_decode(const std::string& text, const std::string& what,
                          const std::string& shown) {
  // Strict: the standard alphabet, '=' only as one or two final characters (OpenSSL
  // alone would skip whitespace and decode '=' anywhere), as the reference reads it.
  const auto body_end = text.find_last_not_of('=');
  const bool bad_padding = body_end == std::string::npos || text.size() - body_end - 1 > 2;
  if (text.empty() || text.size() % 4 != 0 || bad_padding ||
      text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") <=
          body_end) {
    malformed(shown, what + " is not base64");
  }
  std::string out(text.size() / 4 * 3, '\0');
  const int size = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                   reinterpret_cast<const unsigned char*>(text.data()),
                                   static_cast<int>(text.size()));
  if (size < 0) {
    malformed(shown, what + " is not base64");
  }
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t padding = 0;
  for (auto it = text.rbegin(); it != text.rend() && *it == '=' && padding < 2; ++it) {
    ++padding;
  }
  out.resize(static_cast<size_t>(size) - padding);
  return out;
}

bool is_hex_digest(const std::string& text) {
  return text.size() == 64 && text.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

// The parts of the Sigstore bundle the key mode uses.
struct Envelope {
  std::string key_hint;
  std::string payload;    // decoded
  std::string signature;  // decoded, DER ECDSA
};

// The Sigstore bundle's schema, as strict as the reference reader: no field beyond
// those below (package/signature_file.py checks the same sets).
void only_fields(const json& object, std::initializer_list<const char*> allowed, const std::string& where,
                 const std::string& shown) {
  if (!object.is_object()) {
    malformed(shown, (where.empty() ? std::string("the document") : where) + " is not an object");
  }
  for (const auto& item : object.items()) {
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* name) { return item.key() == name; })) {
      malformed(shown, "unexpected field " + where + (where.empty() ? "" : ".") + item.key());
    }
  }
}

void optional_type(const json& object, const char* key, bool (json::*is_type)() const noexcept,
                   const char* type, const std::string& where, const std::string& shown) {
  if (object.contains(key) && !(object.at(key).*is_type)()) {
    malformed(shown, where + "." + key + " is not " + type);
  }
}

Envelope read_envelope(const std::string& path, const std::string& shown) {
  json document;
  try {
    const auto text = read_small_file(path, shown);
    if (text.rfind("\xEF\xBB\xBF", 0) == 0) {
      malformed(shown, "not JSON (it starts with a byte-order mark)");
    }
    document = parse_json_limited(text);
  } catch (const JsonTextError& e) {
    malformed(shown, std::string("not JSON (") + e.what() + ")");
  }
  if (!document.is_object()) {
    malformed(shown, "not a JSON object");
  }
  only_fields(document, {"mediaType", "verificationMaterial", "dsseEnvelope"}, "", shown);
  const auto media_type = string_member(document, "mediaType", "", shown);
  if (media_type != kBundleMediaType) {
    malformed(shown, "mediaType is '" + media_type + "', expected '" + kBundleMediaType + "'");
  }
  Envelope envelope;
  const auto& material = member(document, "verificationMaterial", "", shown);
  if (material.is_object() && material.contains("publicKey")) {
    only_fields(material, {"publicKey", "tlogEntries", "timestampVerificationData"}, "verificationMaterial",
                shown);
    optional_type(material, "tlogEntries", &json::is_array, "a list", "verificationMaterial", shown);
    const auto& key = material.at("publicKey");
    only_fields(key, {"hint"}, "verificationMaterial.publicKey", shown);
    optional_type(key, "hint", &json::is_string, "a string", "verificationMaterial.publicKey", shown);
    if (key.contains("hint")) {
      envelope.key_hint = key.at("hint").get<std::string>();
    }
  } else {
    malformed(shown, "no verificationMaterial.publicKey: it was not signed with a key pair "
                     "(certificates and Sigstore keyless signing are not supported here)");
  }
  const auto& dsse = member(document, "dsseEnvelope", "", shown);
  only_fields(dsse, {"payload", "payloadType", "signatures"}, "dsseEnvelope", shown);
  const auto payload_type = string_member(dsse, "payloadType", "dsseEnvelope.", shown);
  if (payload_type != kPayloadType) {
    malformed(shown, "dsseEnvelope.payloadType is '" + payload_type + "', expected '" +
                         kPayloadType + "'");
  }
  envelope.payload = base64_decode(string_member(dsse, "payload", "dsseEnvelope.", shown),
                                   "dsseEnvelope.payload", shown);
  const auto& signatures = member(dsse, "signatures", "dsseEnvelope.", shown);
  if (!signatures.is_array() || signatures.size() != 1) {
    malformed(shown, "dsseEnvelope.signatures must hold exactly one signature");
  }
  only_fields(signatures.at(0), {"sig", "keyid"}, "dsseEnvelope.signatures[0]", shown);
  optional_type(signatures.at(0), "keyid", &json::is_string, "a string", "dsseEnvelope.signatures[0]", shown);
  envelope.signature = base64_decode(string_member(signatures.at(0), "sig", "dsseEnvelope.signatures[0].", shown),
                                     "dsseEnvelope.signatures[0].sig", shown);
  return envelope;
}

// The in-toto statement model-signing writes, checked for self-consistency: the
// subject's digest is the SHA-256 of the resources' digests in their listed order.
SignedManifest read_statement(const Envelope& envelope, const std::string& shown) {
  json statement;
  try {
    statement = parse_json_limited(envelope.payload);
  } catch (const JsonTextError&) {
    malformed(shown, "the signed payload is not JSON");
  }
  if (string_member(statement, "_type", "payload.", shown) != kStatementType) {
    malformed(shown, std::string("the payload is not an in-toto ") + kStatementType + " statement");
  }
  const auto predicate_type = string_member(statement, "predicateType", "payload.", shown);
  if (predicate_type != kPredicateType) {
    malformed(shown, "payload.predicateType is '" + predicate_type + "', expected '" +
                         kPredicateType + "'");
  }
  SignedManifest manifest;
  manifest.key_hint = envelope.key_hint;
  const auto& subjects = member(statement, "subject", "payload.", shown);
  if (!subjects.is_array() || subjects.size() != 1) {
    malformed(shown, "payload.subject must hold exactly one subject");
  }
  manifest.subject_name = string_member(subjects.at(0), "name", "payload.subject[0].", shown);
  manifest.subject_sha256 = string_member(member(subjects.at(0), "digest", "payload.subject[0].", shown),
                                          "sha256", "payload.subject[0].digest.", shown);
  const auto& predicate = member(statement, "predicate", "payload.", shown);
  const auto& serialization = member(predicate, "serialization", "payload.predicate.", shown);
  const auto method = string_member(serialization, "method", "payload.predicate.serialization.", shown);
  if (method != "files") {
    malformed(shown, "it was signed with the '" + method + "' method; sign with the default 'files' method");
  }
  const auto hash_type = string_member(serialization, "hash_type", "payload.predicate.serialization.", shown);
  if (hash_type != "sha256") {
    malformed(shown, "it was signed with " + hash_type + " digests; sign with the default sha256");
  }
  const auto& resources = member(predicate, "resources", "payload.predicate.", shown);
  if (!resources.is_array()) {
    malformed(shown, "payload.predicate.resources is not a list");
  }
  Sha256 root;
  std::set<std::string> names;
  for (size_t i = 0; i < resources.size(); ++i) {
    const auto where = "payload.predicate.resources[" + std::to_string(i) + "].";
    SignedFile file{string_member(resources.at(i), "name", where, shown),
                    string_member(resources.at(i), "digest", where, shown)};
    const auto algorithm = string_member(resources.at(i), "algorithm", where, shown);
    if (algorithm != "sha256" || !is_hex_digest(file.sha256)) {
      malformed(shown, where + "digest is not a sha256 digest");
    }
    if (!names.insert(file.name).second) {
      malformed(shown, "the file " + file.name + " is listed twice");
    }
    root.update(from_hex(file.sha256).data(), 32);
    manifest.files.push_back(std::move(file));
  }
  if (to_hex(root.finish()) != manifest.subject_sha256) {
    malformed(shown, "the statement is inconsistent: its subject digest is not the digest of its files");
  }
  return manifest;
}

// DSSE's pre-authentication encoding: what the signature covers.
std::string pre_authentication_encoding(const std::string& payload) {
  std::string pae = "DSSEv1 ";
  pae.append(std::to_string(std::char_traits<char>::length(kPayloadType))).append(" ");
  pae.append(kPayloadType).append(" ");
  pae.append(std::to_string(payload.size())).append(" ");
  pae.append(payload);
  return pae;
}

[[noreturn]] void bad_key(const std::string& path, const std::string& reason) {
  std::string message = "trusted key " + path + ": " + reason;
  throw RunnerError(message, "bad_key");
}

}  // namespace

std::string short_digest(const std::string& hex) {
  return hex.size() > 16 ? hex.substr(0, 16) + "…" : hex;  // an ellipsis
}

TrustedKey TrustedKey::load(const std::string& pem_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(pem_path, ec)) {
    bad_key(pem_path, "not found. Pass the PEM public key that pairs with the signing key "
                      "(openssl ec -in KEY.pem -pubout -out PUB.pem makes it)");
  }
  std::ifstream file(pem_path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  const auto pem = text.str();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                &BIO_free);
  EVP_PKEY* raw = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  ERR_clear_error();
  if (raw == nullptr) {
    if (pem.find("PRIVATE KEY-----") != std::string::npos) {
      bad_key(pem_path, "this is a private key; pass the public key: openssl ec -in KEY.pem -pubout -out "
                        "PUB.pem (and keep the private key off servers)");
    }
    bad_key(pem_path, "not a PEM public key (expected '-----BEGIN PUBLIC KEY-----'; "
                      "openssl ec -in KEY.pem -pubout -out PUB.pem makes one)");
  }
  TrustedKey key;
  key.key_ = std::shared_ptr<void>(raw, [](void* p) { EVP_PKEY_free(static_cast<EVP_PKEY*>(p)); });
  key.path_ = pem_path;
  if (EVP_PKEY_get_base_id(raw) != EVP_PKEY_EC) {
    // The same names as the Python side's ("an Ed25519 key").
    const int id = EVP_PKEY_get_base_id(raw);
    const char* sn = OBJ_nid2sn(id);
    const std::string type = id == EVP_PKEY_ED25519 ? "an Ed25519"
                             : id == EVP_PKEY_ED448 ? "an Ed448"
                             : id == EVP_PKEY_RSA   ? "an RSA"
                             : id == EVP_PKEY_DSA   ? "a DSA"
                                                    : std::string("a ") + (sn ? sn : "non-EC");
    bad_key(pem_path, type + " key; model-signing's key mode takes EC keys on P-256, P-384 or P-521");
  }
  // The NIST curves only, by name: secp256k1 or brainpool keys have the same sizes.
  char group[80] = {0};
  size_t group_size = 0;
  EVP_PKEY_get_group_name(raw, group, sizeof(group), &group_size);
  const std::string curve = group;
  key.bits_ = curve == "prime256v1" ? 256 : curve == "secp384r1" ? 384 : curve == "secp521r1" ? 521 : 0;
  if (key.bits_ == 0) {
    bad_key(pem_path, "an EC key on " + (curve.empty() ? std::string("an unnamed curve") : curve) +
                          "; model-signing's key mode takes EC keys on P-256, P-384 or P-521");
  }
  // The hint is taken over the key as cryptography encodes it (uncompressed point,
  // named curve), whatever form the PEM file used.
  EVP_PKEY* normal = EVP_PKEY_dup(raw);
  if (normal == nullptr ||
      EVP_PKEY_set_utf8_string_param(normal, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT,
                                     OSSL_PKEY_EC_POINT_CONVERSION_FORMAT_UNCOMPRESSED) != 1 ||
      EVP_PKEY_set_utf8_string_param(normal, OSSL_PKEY_PARAM_EC_ENCODING,
                                     OSSL_PKEY_EC_ENCODING_GROUP) != 1) {
    EVP_PKEY_free(normal);
    ERR_clear_error();
    bad_key(pem_path, "OpenSSL could not re-encode it");
  }
  std::shared_ptr<EVP_PKEY> normalised(normal, &EVP_PKEY_free);
  // model-signing's key hint: the SHA-256 of the key's PEM SubjectPublicKeyInfo.
  std::unique_ptr<BIO, decltype(&BIO_free)> out(BIO_new(BIO_s_mem()), &BIO_free);
  char* data = nullptr;
  if (!out || PEM_write_bio_PUBKEY(out.get(), normalised.get()) != 1) {
    bad_key(pem_path, "OpenSSL could not re-encode it");
  }
  const long size = BIO_get_mem_data(out.get(), &data);
  key.hint_ = to_hex(sha256(std::string(data, static_cast<size_t>(size))));
  return key;
}

SignedManifest read_signature(const std::string& path) {
  return read_statement(read_envelope(path, path), path);
}

SignedManifest verify_signature(const std::string& path, const TrustedKey& key,
                                const std::string& shown) {
  const auto envelope = read_envelope(path, shown);
  // The hint is not signed; it only tells a wrong key from an altered signature.
  if (!envelope.key_hint.empty() && envelope.key_hint != key.hint()) {
    throw RunnerError(shown + ": signed by another key (key hint " + short_digest(envelope.key_hint) +
                          "), not the trusted key " + key.path() + " (hint " +
                          short_digest(key.hint()) + ")",
                      "wrong_key");
  }
  const EVP_MD* digest = key.bits() == 256 ? EVP_sha256() : key.bits() == 384 ? EVP_sha384() : EVP_sha512();
  const auto pae = pre_authentication_encoding(envelope.payload);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  const bool verified =
      context &&
      EVP_DigestVerifyInit(context.get(), nullptr, digest, nullptr,
                           static_cast<EVP_PKEY*>(key.evp_key())) == 1 &&
      EVP_DigestVerify(context.get(), reinterpret_cast<const unsigned char*>(envelope.signature.data()),
                       envelope.signature.size(), reinterpret_cast<const unsigned char*>(pae.data()),
                       pae.size()) == 1;
  ERR_clear_error();
  if (!verified) {
    throw RunnerError(shown + ": bad signature: the signed statement does not verify with the trusted key " +
                          key.path() + "; the signature or its payload was altered",
                      "bad_signature");
  }
  return read_statement(envelope, shown);
}

void check_signed_files(const SignedManifest& manifest,
                        const std::map<std::string, std::string>& on_disk, const std::string& dir) {
  std::map<std::string, std::string> signed_files;
  for (const auto& file : manifest.files) {
    signed_files.emplace(file.name, file.sha256);
  }
  std::string kind;
  std::string message;
  const auto problem = [&](const std::string& name, const std::string& what, const std::string& k) {
    if (kind.empty()) {
      kind = k;
    } else {
      message.append("\n");
    }
    message.append(dir).append("/").append(name).append(": ").append(what);
  };
  std::set<std::string> names;
  for (const auto& [name, digest] : signed_files) names.insert(name);
  for (const auto& [name, digest] : on_disk) names.insert(name);
  for (const auto& name : names) {
    const auto signed_it = signed_files.find(name);
    const auto disk_it = on_disk.find(name);
    if (disk_it == on_disk.end()) {
      problem(name, "missing file: signed, but not in the bundle", "missing_file");
    } else if (signed_it == signed_files.end()) {
      problem(name, "unknown file: in the bundle, but not in the signature", "unknown_file");
    } else if (signed_it->second != disk_it->second) {
      problem(name, "digest mismatch: sha256 " + short_digest(disk_it->second) + ", signed " +
                        short_digest(signed_it->second),
              "digest_mismatch");
    }
  }
  if (!kind.empty()) {
    throw RunnerError(message, kind);
  }
}

}  // namespace aoti_runner
