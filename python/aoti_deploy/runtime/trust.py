"""The trust policy, applied before anything native loads: what a runner may run,
given a trusted key (--trusted-key, else $AOTI_DEPLOY_TRUSTED_KEY) and
--require-signature. A signed bundle under a trusted key is copied into a private
folder and the copy verified; only the copy is loaded. cpp_runtime/core/bundle.cpp
applies the same policy, in the same words."""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Sequence

from .._closing import ClosedOnExit
from ..errors import AotiDeployError, PackageError
from ..package.bundle import (
    PACKAGE_NAME,
    SIGNATURE_NAME,
    TRUSTED_KEY_ENV,
    check_libraries,
    is_bundle,
    private_copy,
    read_layout,
)
from ..package.spec import PackageSpec

FLAG_SOURCE = "--trusted-key"
ENV_SOURCE = f"${TRUSTED_KEY_ENV}"
NOT_VERIFIED = (
    f"signature: not verified (no trusted key; pass --trusted-key PUB.pem or set {TRUSTED_KEY_ENV})"
)

if TYPE_CHECKING:  # signing.py is imported only to verify
    from ..package.signature_file import SignedManifest


@dataclass(frozen=True)
class TrustPolicy:
    """The trusted key (a PEM public key's path; None: none) and where it came from
    ("--trusted-key" or "$AOTI_DEPLOY_TRUSTED_KEY"), and --require-signature."""

    trusted_key: Path | None = None
    source: str = ""
    require_signature: bool = False

    @property
    def why(self) -> str:
        """Why an unsigned input is refused, for messages."""
        if self.trusted_key is not None:
            return f"a trusted key is set ({self.source})"
        return "--require-signature is set"


def trust_policy(flag_key: str | os.PathLike[str] | None, require_signature: bool) -> TrustPolicy:
    """The policy of a runner's options: the flag's key, else the environment's (an
    empty variable counts as unset)."""
    if flag_key is not None and str(flag_key):
        return TrustPolicy(Path(flag_key), FLAG_SOURCE, require_signature)
    value = os.environ.get(TRUSTED_KEY_ENV)
    if value:
        return TrustPolicy(Path(value), ENV_SOURCE, require_signature)
    return TrustPolicy(None, "", require_signature)


@dataclass
class OpenedModel(ClosedOnExit):
    """What a runner loads once the policy is met. Close it (or use it as a context
    manager) to remove the private copy."""

    origin: Path  # the path the user gave
    package: Path  # the .pt2 (or .onnx) to load: inside the private copy when verified
    op_libraries: list[Path]  # a bundle's, in load order; empty for a bare package
    spec: PackageSpec
    is_bundle: bool = False
    signed: bool = False
    verified: bool = False
    signature: SignedManifest | None = None  # the verified statement
    copy_dir: Path | None = None
    verify_seconds: float = 0.0
    status: str | None = None  # a line for the user ("signature: ..."), or None
    _cleanup: ExitStack = field(default_factory=ExitStack, repr=False)

    def close(self) -> None:
        self._cleanup.close()



def refuse_library_arguments(path: str | os.PathLike[str], libraries: Sequence[object]) -> None:
    """A bundle carries its own op libraries; op library arguments with one are a
    usage error (layout errors come first, as the names come from the layout).

    Raises:
        AotiDeployError (kind usage), PackageError (kind bundle_layout).
    """
    if libraries and is_bundle(path):
        names = ", ".join(read_layout(path).libraries) or "none"
        raise AotiDeployError(
            f"a bundle carries its own op libraries ({names}); do not pass op libraries with it", kind="usage"
        )


def _read_bare_spec(path: Path) -> PackageSpec:
    from . import is_onnx_path

    if is_onnx_path(path):
        from .onnx_runtime import read_onnx_spec

        return read_onnx_spec(path)
    from ..package.archive import read_package_spec

    return read_package_spec(path)


def open_model(path: str | os.PathLike[str], policy: TrustPolicy) -> OpenedModel:
    """Apply the trust policy to a bare package (or .onnx file) or a bundle, and read
    the spec of what is to run. Nothing native is loaded here.

    - A trusted key set: a bare package or an unsigned bundle is refused; a signed
      bundle is copied into a private folder, the copy verified, and the copy is what
      the result names.
    - No key, --require-signature: unsigned input is refused; a signed bundle too,
      as there is nothing to verify it with.
    - Neither: bare packages and bundles run in place, unverified.

    A verification checks, in this order (aoti_runner's too), and stops at the first
    failure: 1 the bundle's layout; 2 its private copy; 3 the trusted key; 4 the
    signature file's format; 5 its key hint against the trusted key's; 6 the ECDSA
    signature over the DSSE envelope; 7 the signed statement; 8 the copy's files
    against the signed ones (nothing missing, nothing extra, the same digests).
    Steps 4 to 8 are model-signing's verify, with our own readers and file-set check
    around it (package/signing.py).

    Raises:
        PackageError: kinds unsigned, bundle_layout, bundle_copy, bad_key,
            malformed_signature, wrong_key, bad_signature, missing_file,
            unknown_file, digest_mismatch, or the spec reader's.
        AotiDeployError: kind no_trusted_key (a usage error).
        SigningUnavailableError: verifying needs the sign extra.
    """
    path = Path(path)
    strict = policy.trusted_key is not None or policy.require_signature
    if not is_bundle(path):
        if strict and path.exists():
            raise PackageError(
                f"{path} is a bare package, and {policy.why}, so only a signed bundle may run. Make one: "
                f"aoti-deploy bundle {path} --output DIR --sign-key KEY.pem",
                kind="unsigned",
            )
        return OpenedModel(origin=path, package=path, op_libraries=[], spec=_read_bare_spec(path))

    from ..package.archive import read_package_spec

    layout = read_layout(path)  # step 1
    if strict and not layout.signed:
        raise PackageError(
            f"{path} is not signed (no {SIGNATURE_NAME}), and {policy.why}, so it is refused. Sign it: "
            f"aoti-deploy bundle {path} --output {path} --sign-key KEY.pem",
            kind="unsigned",
        )
    if policy.trusted_key is None:
        if policy.require_signature:
            raise AotiDeployError(
                f"--require-signature: {path} is signed, but no trusted key is set to verify it with; pass "
                f"--trusted-key PUB.pem or set {TRUSTED_KEY_ENV}",
                kind="no_trusted_key",
            )
        spec = read_package_spec(layout.package)
        return OpenedModel(
            origin=path,
            package=layout.package,
            op_libraries=check_libraries(layout, spec),
            spec=spec,
            is_bundle=True,
            signed=layout.signed,
            status=NOT_VERIFIED if layout.signed else None,
        )

    from ..package.signature_file import short_digest
    from ..package.signing import check_public_key, require_sign_extra, verify_bundle

    require_sign_extra()  # the import is not part of the verification's time
    opened_stack = ExitStack()
    try:
        started = time.perf_counter()
        copy = opened_stack.enter_context(private_copy(path))  # step 2
        hint = check_public_key(policy.trusted_key)  # step 3
        manifest = verify_bundle(copy.dir, policy.trusted_key, path, copy.digests)  # steps 4-8
        seconds = time.perf_counter() - started
        copy_layout = read_layout(copy.dir, shown=path)
        package = copy.dir / PACKAGE_NAME
        spec = read_package_spec(package)
        libraries = check_libraries(copy_layout, spec)
        files = [name for name in copy.sizes if name != SIGNATURE_NAME]
        megabytes = sum(copy.sizes[name] for name in files) / 1e6
        status = (
            f"signature: verified {len(files)} files ({megabytes:.1f} MB) with {policy.trusted_key} "
            f"(key hint {short_digest(hint)}) in {seconds * 1e3:.1f} ms; running the private copy {copy.dir}"
        )
        return OpenedModel(
            origin=path,
            package=package,
            op_libraries=libraries,
            spec=spec,
            is_bundle=True,
            signed=True,
            verified=True,
            signature=manifest,
            copy_dir=copy.dir,
            verify_seconds=seconds,
            status=status,
            _cleanup=opened_stack,
        )
    except BaseException:
        opened_stack.close()
        raise


def verifies_with(trusted_key: str | os.PathLike[str]) -> Callable[[Path], None]:
    """A check for write_bundle's ``check_staged``: the staged bundle must be signed
    and verify with ``trusted_key``, as a runner will verify it."""

    def check(staged: Path) -> None:
        with open_model(staged, TrustPolicy(Path(trusted_key), "--trusted-key", True)):
            pass  # verified; the private copy is removed

    return check
