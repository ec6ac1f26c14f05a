"""What inspect shows of a deploy bundle: its signature, read (and verified only when
a verification is passed in), and each file's digest against the signed one, in
aoti_runner --inspect's words."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import PackageError
from .bundle import SIGNATURE_NAME, BundleLayout, file_digests
from .signature_file import SignedManifest, read_signature


@dataclass
class BundleReport:
    """What inspect shows of a bundle: its signature (read, and verified only when
    ``verified_with`` is set) and each file's digest against the signed one."""

    dir: Path
    signature: SignedManifest | None  # None when unsigned or unreadable
    signature_error: str | None
    verified_with: str | None
    files: list[tuple[str, str, str]]  # (name, sha256 or "", state)

    def rows(self) -> list[tuple[str, str]]:
        """inspect's rows, in aoti_runner --inspect's words."""
        rows = [("bundle", str(self.dir))]
        if self.signature_error is not None:
            rows.append(("signature", self.signature_error))
        elif self.signature is None:
            rows.append(("signature", "not signed"))
        else:
            described = f"{SIGNATURE_NAME}, key hint {self.signature.key_hint or 'none'}, {len(self.signature.files)} files"
            if self.verified_with is not None:
                described += f", verified with {self.verified_with}"
            else:
                described += " (not verified: the runners verify it with --trusted-key)"
            rows.append(("signature", described))
        for name, digest, state in self.files:
            if state == "missing":
                rows.append((f"sha256 {name}", f"missing (signed {digest})"))
            else:
                rows.append((f"sha256 {name}", digest + (f" ({state})" if state else "")))
        return rows

    def to_json(self) -> dict[str, object]:
        signature: dict[str, object] | None = None
        if self.signature_error is not None:
            signature = {"file": SIGNATURE_NAME, "error": self.signature_error}
        elif self.signature is not None:
            signature = {
                "file": SIGNATURE_NAME,
                "key_hint": self.signature.key_hint,
                "subject": {"name": self.signature.subject_name, "sha256": self.signature.subject_sha256},
                "method": self.signature.method,
                "files": len(self.signature.files),
                "verified": self.verified_with is not None,
                "trusted_key": self.verified_with,
            }
        return {
            "dir": str(self.dir),
            "signed": self.signature is not None or self.signature_error is not None,
            "signature": signature,
            "files": [{"name": name, "sha256": digest, "state": state} for name, digest, state in self.files],
        }


def describe_bundle(
    layout: BundleLayout, verified: SignedManifest | None = None, verified_with: str | None = None
) -> BundleReport:
    """The bundle's files against its signature, read without checking it, unless
    ``verified`` (the SignedManifest a verification returned) is given.

    States: "as signed", "differs from the signature", "not in the signature",
    "missing" (signed, but not in the bundle), or "" for an unsigned bundle.
    """
    signature = verified
    error = None
    if signature is None and layout.signed:
        try:
            signature = read_signature(layout.dir / SIGNATURE_NAME, f"{layout.shown}/{SIGNATURE_NAME}")
        except PackageError as problem:
            error = str(problem)
    signed = signature.digests() if signature is not None else {}
    files: list[tuple[str, str, str]] = []
    present = set()
    for found in file_digests(layout.dir):
        if found.name == SIGNATURE_NAME:
            continue
        present.add(found.name)
        if signature is None:
            state = ""
        elif found.name not in signed:
            state = "not in the signature"
        elif signed[found.name] == found.sha256:
            state = "as signed"
        else:
            state = "differs from the signature"
        files.append((found.name, found.sha256, state))
    for name, digest in signed.items():
        if name not in present:
            files.append((name, digest, "missing"))
    return BundleReport(layout.shown, signature, error, verified_with if verified is not None else None, files)
