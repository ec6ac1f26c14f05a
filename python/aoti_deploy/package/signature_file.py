"""A bundle's signature file (model.sig, an OpenSSF Model Signing Sigstore bundle)
read without trusting it and without cryptography: its envelope, its in-toto
statement, the signed files and their digests; and the check of a bundle's files
against the signed set. cpp_runtime/core/signature.cpp reads it in the same words;
signing.py verifies it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import PackageError

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# Far above any real signature (a few kB per hundred files): a huge file is refused
# before it is read. The C++ reader has the same limit.
MAX_SIGNATURE_BYTES = 16 << 20



class SignedFile(NamedTuple):
    name: str
    sha256: str  # hex


@dataclass
class SignedManifest:
    """What a signature file claims. Only ``verify_bundle``'s result is to be trusted;
    ``read_signature``'s is for showing."""

    key_hint: str  # hex SHA-256 of the signing key's PEM SubjectPublicKeyInfo; may be empty
    subject_name: str
    subject_sha256: str
    method: str  # the serialization method: always "files" once read
    files: list[SignedFile] = field(default_factory=list)  # in the statement's order

    def digests(self) -> dict[str, str]:
        return {file.name: file.sha256 for file in self.files}


def short_digest(hex_digest: str) -> str:
    """The first 16 hex digits and an ellipsis, for messages."""
    return hex_digest[:16] + "…" if len(hex_digest) > 16 else hex_digest



class Envelope(NamedTuple):
    key_hint: str
    payload: bytes  # decoded
    signature: bytes  # decoded, DER ECDSA


def malformed_signature(shown: str | Path, detail: str) -> PackageError:
    return PackageError(
        f"{shown}: malformed signature: {detail}. Expected an OpenSSF Model Signing signature (a Sigstore "
        "bundle JSON); sign the bundle again (aoti-deploy bundle PACKAGE --output DIR --sign-key KEY.pem)",
        kind="malformed_signature",
    )


def _member(obj: Any, key: str, where: str, shown: str | Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise malformed_signature(shown, f"no {where}{key}")
    return obj[key]


def _string(obj: Any, key: str, where: str, shown: str | Path) -> str:
    value = _member(obj, key, where, shown)
    if not isinstance(value, str):
        raise malformed_signature(shown, f"{where}{key} is not a string")
    return value


def _base64(text: str, what: str, shown: str | Path) -> bytes:
    # Strict: the standard alphabet, '=' only as one or two final characters (as
    # signature.cpp reads it; b64decode alone would take any run of final '=').
    if not text or len(text) % 4 or not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", text):
        raise malformed_signature(shown, f"{what} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise malformed_signature(shown, f"{what} is not base64") from None


def _only_fields(obj: Any, allowed: set[str], where: str, shown: str | Path) -> None:
    """The Sigstore bundle's schema, as strict as the reference reader: no field beyond
    ``allowed`` (signature.cpp checks the same sets)."""
    if not isinstance(obj, dict):
        raise malformed_signature(shown, f"{where or 'the document'} is not an object")
    for key in obj:
        if key not in allowed:
            raise malformed_signature(shown, f"unexpected field {where}{'.' if where else ''}{key}")


def _optional_type(obj: dict, key: str, kind: type, name: str, where: str, shown: str | Path) -> None:
    if key in obj and not isinstance(obj[key], kind):
        raise malformed_signature(shown, f"{where}.{key} is not {name}")


def read_envelope(path: Path, shown: str | Path) -> Envelope:
    """The parts of the Sigstore bundle the key mode uses (step 4 of a verification)."""
    try:
        size = path.stat().st_size
        if size > MAX_SIGNATURE_BYTES:
            raise malformed_signature(shown, f"it is {size} bytes, more than any signature (16 MB)")
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise malformed_signature(shown, f"cannot read it ({error.strerror or error})") from error
    except UnicodeDecodeError:
        raise malformed_signature(shown, "not JSON (not UTF-8 text)") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise malformed_signature(shown, f"not JSON ({error})") from None
    except (ValueError, RecursionError) as error:  # a huge integer, or absurd nesting
        raise malformed_signature(shown, f"not JSON ({type(error).__name__})") from None
    if not isinstance(document, dict):
        raise malformed_signature(shown, "not a JSON object")
    _only_fields(document, {"mediaType", "verificationMaterial", "dsseEnvelope"}, "", shown)
    media_type = _string(document, "mediaType", "", shown)
    if media_type != BUNDLE_MEDIA_TYPE:
        raise malformed_signature(shown, f"mediaType is '{media_type}', expected '{BUNDLE_MEDIA_TYPE}'")
    material = _member(document, "verificationMaterial", "", shown)
    if not isinstance(material, dict) or "publicKey" not in material:
        raise malformed_signature(
            shown,
            "no verificationMaterial.publicKey: it was not signed with a key pair (certificates and Sigstore "
            "keyless signing are not supported here)",
        )
    _only_fields(material, {"publicKey", "tlogEntries", "timestampVerificationData"}, "verificationMaterial", shown)
    _optional_type(material, "tlogEntries", list, "a list", "verificationMaterial", shown)
    public_key = material["publicKey"]
    _only_fields(public_key, {"hint"}, "verificationMaterial.publicKey", shown)
    _optional_type(public_key, "hint", str, "a string", "verificationMaterial.publicKey", shown)
    hint = public_key.get("hint")
    dsse = _member(document, "dsseEnvelope", "", shown)
    _only_fields(dsse, {"payload", "payloadType", "signatures"}, "dsseEnvelope", shown)
    payload_type = _string(dsse, "payloadType", "dsseEnvelope.", shown)
    if payload_type != PAYLOAD_TYPE:
        raise malformed_signature(shown, f"dsseEnvelope.payloadType is '{payload_type}', expected '{PAYLOAD_TYPE}'")
    payload = _base64(_string(dsse, "payload", "dsseEnvelope.", shown), "dsseEnvelope.payload", shown)
    signatures = _member(dsse, "signatures", "dsseEnvelope.", shown)
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise malformed_signature(shown, "dsseEnvelope.signatures must hold exactly one signature")
    _only_fields(signatures[0], {"sig", "keyid"}, "dsseEnvelope.signatures[0]", shown)
    _optional_type(signatures[0], "keyid", str, "a string", "dsseEnvelope.signatures[0]", shown)
    signature = _base64(
        _string(signatures[0], "sig", "dsseEnvelope.signatures[0].", shown), "dsseEnvelope.signatures[0].sig", shown
    )
    return Envelope(hint if isinstance(hint, str) else "", payload, signature)


def read_statement(envelope: Envelope, shown: str | Path) -> SignedManifest:
    """The in-toto statement model-signing writes (step 7), checked for consistency:
    the subject's digest is the SHA-256 of the resources' digests in listed order."""
    try:
        statement = json.loads(envelope.payload)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise malformed_signature(shown, "the signed payload is not JSON") from None
    if _string(statement, "_type", "payload.", shown) != STATEMENT_TYPE:
        raise malformed_signature(shown, f"the payload is not an in-toto {STATEMENT_TYPE} statement")
    predicate_type = _string(statement, "predicateType", "payload.", shown)
    if predicate_type != PREDICATE_TYPE:
        raise malformed_signature(shown, f"payload.predicateType is '{predicate_type}', expected '{PREDICATE_TYPE}'")
    subjects = _member(statement, "subject", "payload.", shown)
    if not isinstance(subjects, list) or len(subjects) != 1:
        raise malformed_signature(shown, "payload.subject must hold exactly one subject")
    subject_name = _string(subjects[0], "name", "payload.subject[0].", shown)
    subject_sha256 = _string(
        _member(subjects[0], "digest", "payload.subject[0].", shown), "sha256", "payload.subject[0].digest.", shown
    )
    predicate = _member(statement, "predicate", "payload.", shown)
    serialization = _member(predicate, "serialization", "payload.predicate.", shown)
    method = _string(serialization, "method", "payload.predicate.serialization.", shown)
    if method != "files":
        raise malformed_signature(shown, f"it was signed with the '{method}' method; sign with the default 'files' method")
    hash_type = _string(serialization, "hash_type", "payload.predicate.serialization.", shown)
    if hash_type != "sha256":
        raise malformed_signature(shown, f"it was signed with {hash_type} digests; sign with the default sha256")
    resources = _member(predicate, "resources", "payload.predicate.", shown)
    if not isinstance(resources, list):
        raise malformed_signature(shown, "payload.predicate.resources is not a list")
    root = hashlib.sha256()
    files: list[SignedFile] = []
    for i, resource in enumerate(resources):
        where = f"payload.predicate.resources[{i}]."
        name = _string(resource, "name", where, shown)
        digest = _string(resource, "digest", where, shown)
        algorithm = _string(resource, "algorithm", where, shown)
        if algorithm != "sha256" or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise malformed_signature(shown, f"{where}digest is not a sha256 digest")
        if any(file.name == name for file in files):
            raise malformed_signature(shown, f"the file {name} is listed twice")
        root.update(bytes.fromhex(digest))
        files.append(SignedFile(name, digest))
    if root.hexdigest() != subject_sha256:
        raise malformed_signature(shown, "the statement is inconsistent: its subject digest is not the digest of its files")
    return SignedManifest(envelope.key_hint, subject_name, subject_sha256, method, files)


def read_signature(path: str | Path, shown: str | Path | None = None) -> SignedManifest:
    """Read a signature file without checking its signature: for showing (inspect),
    never for trusting.

    Args:
        path: the model.sig file.
        shown: how messages name it (default ``path``).

    Raises:
        PackageError (kind malformed_signature): unreadable, not JSON, truncated, or
            not model-signing's key-mode format.
    """
    path = Path(path)
    shown = path if shown is None else shown
    return read_statement(read_envelope(path, shown), shown)


def check_signed_files(manifest: SignedManifest, on_disk: dict[str, str], shown_dir: str | Path) -> None:
    """Step 8: the bundle's files (name -> hex SHA-256, model.sig left out) must be
    exactly the signed ones, with the signed digests. Every problem is listed, one a
    line, by file name; the kind is the first one's, as in the C++ runner.

    Raises:
        PackageError: kind missing_file, unknown_file or digest_mismatch.
    """
    signed = manifest.digests()
    problems: list[tuple[str, str]] = []
    for name in sorted(set(signed) | set(on_disk)):
        if name not in on_disk:
            problems.append(("missing_file", f"{shown_dir}/{name}: missing file: signed, but not in the bundle"))
        elif name not in signed:
            problems.append(("unknown_file", f"{shown_dir}/{name}: unknown file: in the bundle, but not in the signature"))
        elif signed[name] != on_disk[name]:
            problems.append((
                "digest_mismatch",
                f"{shown_dir}/{name}: digest mismatch: sha256 {short_digest(on_disk[name])}, "
                f"signed {short_digest(signed[name])}",
            ))
    if problems:
        raise PackageError("\n".join(message for _, message in problems), kind=problems[0][0])
