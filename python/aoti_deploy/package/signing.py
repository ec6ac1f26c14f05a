"""Signing and verifying deploy bundles with OpenSSF Model Signing (the ``model-signing``
library, key-pair mode): a Sigstore bundle JSON holding a DSSE envelope over an in-toto
statement that lists every signed file's SHA-256. The library does the cryptography;
this module checks keys first (for clear errors), reads signatures without trusting
them (inspect), and maps the library's errors to the kinds cpp_runtime/core/signature.cpp
raises for the same files.

model-signing and cryptography come with the ``sign`` extra and are imported only when
a key is read or a bundle is signed or verified, so the runners start without them."""

from __future__ import annotations

import binascii
import contextlib
import hashlib
import io
from pathlib import Path
from typing import Any

from ..errors import AotiDeployError, PackageError
from .bundle import SIGNATURE_NAME
from .signature_file import (
    PAYLOAD_TYPE,
    SignedManifest,
    Envelope,
    malformed_signature,
    read_envelope,
    read_statement,
    check_signed_files,
    read_signature,
    short_digest,
)

SIGN_EXTRA_HINT = "Install the sign extra: pip install -e '.[sign]' (model-signing and pyopenssl from PyPI)."
MAKE_KEY_PAIR = (
    "openssl ecparam -name prime256v1 -genkey -noout -out key.pem (the private key), then "
    "openssl ec -in key.pem -pubout -out key.pub (its public key)"
)
EC_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}
EC_ONLY = "model-signing's key mode takes EC keys on P-256, P-384 or P-521"

class SigningUnavailableError(AotiDeployError):
    """The optional ``sign`` extra (model-signing, pyopenssl) is not installed."""


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


# --- Verifying ---------------------------------------------------------------------


def _library_malformed(envelope: Envelope, shown: str, detail: str) -> PackageError:
    """The error for a signature the library could not use. Past the key and the
    signature checks, that is the statement's fault: our reader names the problem in
    the C++ runner's words (e.g. a 'shards' signature, on which model-signing 1.1.1
    fails with a TypeError); else the library's own words are given."""
    try:
        read_statement(envelope, shown)
    except PackageError as error:
        return error
    return malformed_signature(shown, detail or "model-signing could not read it")


def _require_standard_encoding(envelope: Envelope, public_key: str | Path, shown: str) -> None:
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
    envelope = read_envelope(signature, shown_signature)  # step 4, in the C++ runner's words
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
    manifest = read_statement(envelope, shown_signature)  # step 7, on the verified payload
    on_disk = {name: digest for name, digest in digests.items() if name != SIGNATURE_NAME}
    check_signed_files(manifest, on_disk, shown_dir)  # step 8
    if library_mismatch is not None:  # not expected: the library and step 8 saw the same files
        raise PackageError(f"{shown_dir}: {library_mismatch}", kind="digest_mismatch")
    return manifest


__all__ = [
    "SIGN_EXTRA_HINT",
    "SigningUnavailableError",
    "check_private_key",
    "check_public_key",
    "key_hint",
    "require_sign_extra",
    "sign_bundle",
    "verify_bundle",
]
