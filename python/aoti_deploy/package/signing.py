"""Signing and verifying deploy bundles with OpenSSF Model Signing (the ``model-signing``
library, key-pair mode): a Sigstore bundle JSON holding a DSSE envelope over an in-toto
statement that lists every signed file's SHA-256. The library does the cryptography;
this module checks keys first (for clear errors), reads signatures without trusting
them (inspect), and maps the library's errors to the kinds cpp_runtime/core/signature.cpp
raises for the same files.

model-signing and cryptography come with the ``sign`` extra and are imported only when
a key is read or a bundle is signed or verified, so the runners start without them."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import AotiDeployError, PackageError
from .bundle import SIGNATURE_NAME

SIGN_EXTRA_HINT = "Install the sign extra: pip install -e '.[sign]' (model-signing and pyopenssl from PyPI)."
MAKE_KEY_PAIR = (
    "openssl ecparam -name prime256v1 -genkey -noout -out key.pem (the private key), then "
    "openssl ec -in key.pem -pubout -out key.pub (its public key)"
)
EC_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
EC_ONLY = "model-signing's key mode takes EC keys on P-256, P-384 or P-521"

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# Far above any real signature (a few kB per hundred files): a huge file is refused
# before it is read. The C++ reader has the same limit.
MAX_SIGNATURE_BYTES = 16 << 20


class SigningUnavailableError(AotiDeployError):
    """The optional ``sign`` extra (model-signing, pyopenssl) is not installed."""


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


def _model_signing() -> Any:
    """The model_signing package, imported on first use: it takes about half a second
    and is only needed to sign or verify."""
    try:
        import model_signing.hashing
        import model_signing.signing
        import model_signing.verifying
    except ImportError as error:
        raise SigningUnavailableError(
            f"signing and verifying bundles need the model-signing library, which is not installed "
            f"({error}). {SIGN_EXTRA_HINT}",
            kind="sign_extra",
        ) from error
    return model_signing


def _crypto() -> Any:
    """cryptography's serialization module (a dependency of model-signing)."""
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError as error:
        raise SigningUnavailableError(
            f"reading signing keys needs the cryptography library, which is not installed ({error}). {SIGN_EXTRA_HINT}",
            kind="sign_extra",
        ) from error
    return serialization


def require_sign_extra() -> None:
    """Import model-signing and cryptography now (about half a second), e.g. so that
    a verification's timing counts the verification only.

    Raises:
        SigningUnavailableError: the sign extra is not installed.
    """
    _crypto()
    _model_signing()


def _key_type(key: Any) -> str:
    """A key's algorithm, for messages: "an Ed25519 key", "an RSA key", ..."""
    from cryptography.hazmat.primitives.asymmetric import dsa, ed448, ed25519, rsa

    for kinds, name in (
        ((ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey), "an Ed25519"),
        ((ed448.Ed448PrivateKey, ed448.Ed448PublicKey), "an Ed448"),
        ((rsa.RSAPrivateKey, rsa.RSAPublicKey), "an RSA"),
        ((dsa.DSAPrivateKey, dsa.DSAPublicKey), "a DSA"),
    ):
        if isinstance(key, kinds):
            return f"{name} key"
    return f"a {type(key).__name__} key"


def _curve_problem(key: Any) -> str | None:
    """Why model-signing's key mode cannot use ``key``, or None if it can."""
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        return f"{_key_type(key)}; {EC_ONLY}"
    if key.curve.name not in EC_CURVES:
        return f"an EC key on {key.curve.name}; {EC_ONLY}"
    return None


def check_private_key(path: str | Path) -> str:
    """Check, before anything is hashed, that ``path`` is a key model-signing can sign
    with: an unencrypted PEM EC private key on P-256, P-384 or P-521.

    Returns:
        The key's curve, e.g. "P-256".

    Raises:
        PackageError (kind bad_key): not found, not a PEM private key, encrypted, a
            public key, or not EC on those curves; the message says how to make one.
        SigningUnavailableError: the sign extra is not installed.
    """
    path = Path(path)
    serialization = _crypto()
    _model_signing()  # refuse now, not after the package is built, if it is missing

    def bad(reason: str) -> PackageError:
        return PackageError(f"signing key {path}: {reason}", kind="bad_key")

    if not path.is_file():
        raise bad(f"not found. Make an EC key pair with: {MAKE_KEY_PAIR}")
    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as error:  # cryptography's "Password was not given but private key is encrypted"
        raise bad(
            "the key is encrypted with a password, which this toolkit cannot pass on; use an unencrypted "
            f"EC key ({MAKE_KEY_PAIR})"
        ) from error
    except Exception as error:  # cryptography raises ValueError, or UnsupportedAlgorithm for odd keys
        if b"PUBLIC KEY-----" in data:
            raise bad(
                "this is a public key; sign with the private key (KEY.pem), and give the runners its public "
                "key with --trusted-key PUB.pem"
            ) from error
        raise bad(f"not a PEM private key. Make an EC key pair with: {MAKE_KEY_PAIR}") from error
    problem = _curve_problem(key)
    if problem:
        raise bad(f"{problem}. Make an EC key pair with: {MAKE_KEY_PAIR}")
    return EC_CURVES[key.curve.name]


def check_public_key(path: str | Path) -> str:
    """Check that ``path`` is a trusted key model-signing can verify with (step 3 of
    a verification, see runtime/trust.py): a PEM EC public key on P-256, P-384 or P-521.

    Returns:
        The key's hint (see ``key_hint``).

    Raises:
        PackageError (kind bad_key): not found, not a PEM public key, a private key,
            or not EC on those curves.
        SigningUnavailableError: the sign extra is not installed.
    """
    path = Path(path)
    serialization = _crypto()

    def bad(reason: str) -> PackageError:
        return PackageError(f"trusted key {path}: {reason}", kind="bad_key")

    if not path.is_file():
        raise bad(
            "not found. Pass the PEM public key that pairs with the signing key "
            "(openssl ec -in KEY.pem -pubout -out PUB.pem makes it)"
        )
    data = path.read_bytes()
    try:
        key = serialization.load_pem_public_key(data)
    except Exception as error:  # ValueError, or UnsupportedAlgorithm for odd keys
        if b"PRIVATE KEY-----" in data:
            raise bad(
                "this is a private key; pass the public key: openssl ec -in KEY.pem -pubout -out PUB.pem "
                "(and keep the private key off servers)"
            ) from error
        raise bad(
            "not a PEM public key (expected '-----BEGIN PUBLIC KEY-----'; openssl ec -in KEY.pem -pubout "
            "-out PUB.pem makes one)"
        ) from error
    problem = _curve_problem(key)
    if problem:
        raise bad(problem)
    return _hint_of(key)


def _hint_of(public_key: Any) -> str:
    serialization = _crypto()
    pem = public_key.public_bytes(
        encoding=serialization.Encoding.PEM, format=serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(pem).hexdigest()


def key_hint(public_key_path: str | Path) -> str:
    """model-signing's hint for a public key: the hex SHA-256 of its PEM
    SubjectPublicKeyInfo (re-encoded, so the file's own line breaks do not matter).
    A signature records its signer's hint, which tells a wrong key from a bad signature.

    Raises:
        PackageError (kind bad_key): as ``check_public_key``.
    """
    return check_public_key(public_key_path)


def sign_bundle(directory: str | Path, private_key: str | Path) -> SignedManifest:
    """Sign every file of ``directory`` (but its model.sig) into ``directory``/model.sig
    with model-signing's key mode and its default 'files' serialization, the form
    both runtimes verify.

    Returns:
        The signature just written, as read back.

    Raises:
        PackageError: a bad key (kind bad_key) or the library failed (kind sign_failed).
        SigningUnavailableError: the sign extra is not installed.
    """
    directory = Path(directory)
    check_private_key(private_key)
    model_signing = _model_signing()
    signature = directory / SIGNATURE_NAME
    try:
        (
            model_signing.signing.Config()
            .use_elliptic_key_signer(private_key=Path(private_key))
            .set_hashing_config(
                model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE_NAME], ignore_git_paths=False)
            )
            .sign(directory, signature)
        )
    except (OSError, ValueError) as error:
        raise PackageError(f"could not sign {directory} with {private_key}: {error}", kind="sign_failed") from error
    return read_signature(signature)


# --- Reading a signature (no cryptography) ---------------------------------------


class _Envelope(NamedTuple):
    key_hint: str
    payload: bytes  # decoded
    signature: bytes  # decoded, DER ECDSA


def _malformed(shown: str | Path, detail: str) -> PackageError:
    return PackageError(
        f"{shown}: malformed signature: {detail}. Expected an OpenSSF Model Signing signature (a Sigstore "
        "bundle JSON); sign the bundle again (aoti-deploy bundle PACKAGE --output DIR --sign-key KEY.pem)",
        kind="malformed_signature",
    )


def _member(obj: Any, key: str, where: str, shown: str | Path) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise _malformed(shown, f"no {where}{key}")
    return obj[key]


def _string(obj: Any, key: str, where: str, shown: str | Path) -> str:
    value = _member(obj, key, where, shown)
    if not isinstance(value, str):
        raise _malformed(shown, f"{where}{key} is not a string")
    return value


def _base64(text: str, what: str, shown: str | Path) -> bytes:
    # Strict: the standard alphabet, '=' only as one or two final characters (as
    # signature.cpp reads it; b64decode alone would take any run of final '=').
    if not text or len(text) % 4 or not re.fullmatch(r"[A-Za-z0-9+/]+={0,2}", text):
        raise _malformed(shown, f"{what} is not base64")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _malformed(shown, f"{what} is not base64") from None


def _only_fields(obj: Any, allowed: set[str], where: str, shown: str | Path) -> None:
    """The Sigstore bundle's schema, as strict as the reference reader: no field beyond
    ``allowed`` (signature.cpp checks the same sets)."""
    if not isinstance(obj, dict):
        raise _malformed(shown, f"{where or 'the document'} is not an object")
    for key in obj:
        if key not in allowed:
            raise _malformed(shown, f"unexpected field {where}{'.' if where else ''}{key}")


def _optional_type(obj: dict, key: str, kind: type, name: str, where: str, shown: str | Path) -> None:
    if key in obj and not isinstance(obj[key], kind):
        raise _malformed(shown, f"{where}.{key} is not {name}")


def _read_envelope(path: Path, shown: str | Path) -> _Envelope:
    """The parts of the Sigstore bundle the key mode uses (step 4 of a verification)."""
    try:
        size = path.stat().st_size
        if size > MAX_SIGNATURE_BYTES:
            raise _malformed(shown, f"it is {size} bytes, more than any signature (16 MB)")
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise _malformed(shown, f"cannot read it ({error.strerror or error})") from error
    except UnicodeDecodeError:
        raise _malformed(shown, "not JSON (not UTF-8 text)") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise _malformed(shown, f"not JSON ({error})") from None
    except (ValueError, RecursionError) as error:  # a huge integer, or absurd nesting
        raise _malformed(shown, f"not JSON ({type(error).__name__})") from None
    if not isinstance(document, dict):
        raise _malformed(shown, "not a JSON object")
    _only_fields(document, {"mediaType", "verificationMaterial", "dsseEnvelope"}, "", shown)
    media_type = _string(document, "mediaType", "", shown)
    if media_type != BUNDLE_MEDIA_TYPE:
        raise _malformed(shown, f"mediaType is '{media_type}', expected '{BUNDLE_MEDIA_TYPE}'")
    material = _member(document, "verificationMaterial", "", shown)
    if not isinstance(material, dict) or "publicKey" not in material:
        raise _malformed(
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
        raise _malformed(shown, f"dsseEnvelope.payloadType is '{payload_type}', expected '{PAYLOAD_TYPE}'")
    payload = _base64(_string(dsse, "payload", "dsseEnvelope.", shown), "dsseEnvelope.payload", shown)
    signatures = _member(dsse, "signatures", "dsseEnvelope.", shown)
    if not isinstance(signatures, list) or len(signatures) != 1:
        raise _malformed(shown, "dsseEnvelope.signatures must hold exactly one signature")
    _only_fields(signatures[0], {"sig", "keyid"}, "dsseEnvelope.signatures[0]", shown)
    _optional_type(signatures[0], "keyid", str, "a string", "dsseEnvelope.signatures[0]", shown)
    signature = _base64(
        _string(signatures[0], "sig", "dsseEnvelope.signatures[0].", shown), "dsseEnvelope.signatures[0].sig", shown
    )
    return _Envelope(hint if isinstance(hint, str) else "", payload, signature)


def _read_statement(envelope: _Envelope, shown: str | Path) -> SignedManifest:
    """The in-toto statement model-signing writes (step 7), checked for consistency:
    the subject's digest is the SHA-256 of the resources' digests in listed order."""
    try:
        statement = json.loads(envelope.payload)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _malformed(shown, "the signed payload is not JSON") from None
    if _string(statement, "_type", "payload.", shown) != STATEMENT_TYPE:
        raise _malformed(shown, f"the payload is not an in-toto {STATEMENT_TYPE} statement")
    predicate_type = _string(statement, "predicateType", "payload.", shown)
    if predicate_type != PREDICATE_TYPE:
        raise _malformed(shown, f"payload.predicateType is '{predicate_type}', expected '{PREDICATE_TYPE}'")
    subjects = _member(statement, "subject", "payload.", shown)
    if not isinstance(subjects, list) or len(subjects) != 1:
        raise _malformed(shown, "payload.subject must hold exactly one subject")
    subject_name = _string(subjects[0], "name", "payload.subject[0].", shown)
    subject_sha256 = _string(
        _member(subjects[0], "digest", "payload.subject[0].", shown), "sha256", "payload.subject[0].digest.", shown
    )
    predicate = _member(statement, "predicate", "payload.", shown)
    serialization = _member(predicate, "serialization", "payload.predicate.", shown)
    method = _string(serialization, "method", "payload.predicate.serialization.", shown)
    if method != "files":
        raise _malformed(shown, f"it was signed with the '{method}' method; sign with the default 'files' method")
    hash_type = _string(serialization, "hash_type", "payload.predicate.serialization.", shown)
    if hash_type != "sha256":
        raise _malformed(shown, f"it was signed with {hash_type} digests; sign with the default sha256")
    resources = _member(predicate, "resources", "payload.predicate.", shown)
    if not isinstance(resources, list):
        raise _malformed(shown, "payload.predicate.resources is not a list")
    root = hashlib.sha256()
    files: list[SignedFile] = []
    for i, resource in enumerate(resources):
        where = f"payload.predicate.resources[{i}]."
        name = _string(resource, "name", where, shown)
        digest = _string(resource, "digest", where, shown)
        algorithm = _string(resource, "algorithm", where, shown)
        if algorithm != "sha256" or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise _malformed(shown, f"{where}digest is not a sha256 digest")
        if any(file.name == name for file in files):
            raise _malformed(shown, f"the file {name} is listed twice")
        root.update(bytes.fromhex(digest))
        files.append(SignedFile(name, digest))
    if root.hexdigest() != subject_sha256:
        raise _malformed(shown, "the statement is inconsistent: its subject digest is not the digest of its files")
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
    return _read_statement(_read_envelope(path, shown), shown)


# --- Verifying ---------------------------------------------------------------------


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


def _library_malformed(envelope: _Envelope, shown: str, detail: str) -> PackageError:
    """The error for a signature the library could not use. Past the key and the
    signature checks, that is the statement's fault: our reader names the problem in
    the C++ runner's words (e.g. a 'shards' signature, on which model-signing 1.1.1
    fails with a TypeError); else the library's own words are given."""
    try:
        _read_statement(envelope, shown)
    except PackageError as error:
        return error
    return _malformed(shown, detail or "model-signing could not read it")


def _require_standard_encoding(envelope: _Envelope, public_key: str | Path, shown: str) -> None:
    """model-signing also accepts signatures over its pre-1.0 encoding of the signed
    message (not DSSE's); the C++ runner does not, so neither does this side: the
    signature must verify over DSSE's pre-authentication encoding itself."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_pem_public_key(Path(public_key).read_bytes())
    digest = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}[key.curve.key_size]
    encoded = b"DSSEv1 %d %s %d " % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(envelope.payload)) + envelope.payload
    try:
        key.verify(envelope.signature, encoded, ec.ECDSA(digest))
    except InvalidSignature:
        raise PackageError(
            f"{shown}: bad signature: the signed statement does not verify with the trusted key {public_key}; the "
            "signature or its payload was altered (or it was made by model-signing before 1.0: sign it again)",
            kind="bad_signature",
        ) from None


def verify_bundle(
    copy_dir: str | Path,
    public_key: str | Path,
    shown_dir: str | Path,
    digests: dict[str, str],
) -> SignedManifest:
    """Verify a bundle's private copy against a trusted public key: model-signing's
    verify (the key hint, the ECDSA signature over the DSSE envelope, the statement, every
    file's digest), then our own check of the file set against the verified statement,
    with the digests of the bytes that were copied.

    Args:
        copy_dir: the private copy (see bundle.private_copy); only it is read.
        public_key: the trusted PEM public key.
        shown_dir: the bundle the user named, for messages.
        digests: the copy's files' SHA-256 (name -> hex), as private_copy computed
            them from the bytes it wrote.

    Returns:
        The verified statement.

    Raises:
        PackageError: kinds bad_key, malformed_signature, wrong_key, bad_signature,
            missing_file, unknown_file, digest_mismatch.
        SigningUnavailableError: the sign extra is not installed.
    """
    copy_dir = Path(copy_dir)
    signature = copy_dir / SIGNATURE_NAME
    shown_signature = f"{shown_dir}/{SIGNATURE_NAME}"
    trusted_hint = check_public_key(public_key)  # step 3
    envelope = _read_envelope(signature, shown_signature)  # step 4, in the C++ runner's words
    model_signing = _model_signing()
    from cryptography.exceptions import InvalidSignature

    library_mismatch = None
    try:
        # The library prints a warning on stdout for signatures without a key hint;
        # stage functions do not print.
        with contextlib.redirect_stdout(io.StringIO()):
            model_signing.verifying.Config().use_elliptic_key_verifier(public_key=Path(public_key)).verify(
                copy_dir, signature
            )
    except InvalidSignature:
        raise PackageError(
            f"{shown_signature}: bad signature: the signed statement does not verify with the trusted key "
            f"{public_key}; the signature or its payload was altered",
            kind="bad_signature",
        ) from None
    except ValueError as error:  # json.JSONDecodeError and pydantic's errors are ValueErrors too
        text = str(error)
        if text.startswith("Key mismatch"):
            raise PackageError(
                f"{shown_signature}: signed by another key (key hint {short_digest(envelope.key_hint)}), not the "
                f"trusted key {public_key} (hint {short_digest(trusted_hint)})",
                kind="wrong_key",
            ) from None
        if not text.startswith("Signature mismatch"):
            detail = text.strip().splitlines()[0] if text.strip() else ""
            raise _library_malformed(envelope, shown_signature, detail) from None
        # The signature verified, the files differ: step 8 below names them.
        library_mismatch = text
    except (KeyError, TypeError, IndexError, AttributeError, binascii.Error, UnicodeDecodeError) as error:
        raise _library_malformed(envelope, shown_signature, f"{type(error).__name__}: {error}") from None
    _require_standard_encoding(envelope, public_key, shown_signature)
    manifest = _read_statement(envelope, shown_signature)  # step 7, on the verified payload
    on_disk = {name: digest for name, digest in digests.items() if name != SIGNATURE_NAME}
    check_signed_files(manifest, on_disk, shown_dir)  # step 8
    if library_mismatch is not None:  # not expected: the library and step 8 saw the same files
        raise PackageError(f"{shown_dir}: {library_mismatch}", kind="digest_mismatch")
    return manifest


__all__ = [
    "SIGN_EXTRA_HINT",
    "SignedFile",
    "SignedManifest",
    "SigningUnavailableError",
    "check_private_key",
    "check_public_key",
    "check_signed_files",
    "key_hint",
    "read_signature",
    "require_sign_extra",
    "short_digest",
    "sign_bundle",
    "verify_bundle",
]
