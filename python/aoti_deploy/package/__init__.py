"""The package contract: the spec document (spec.py), its dtype names (dtypes.py),
package files on disk (archive.py), the host facts a package is checked against
(host.py), and deploy bundles: their layout (bundle.py), signatures (signing.py),
writing (bundle_writer.py) and showing (bundle_report.py)."""

from .archive import check_model_file, read_package_metadata, read_package_spec, rewrite_package_metadata
from .bundle import PACKAGE_NAME, SIGNATURE_NAME, BundleLayout, is_bundle, read_layout
from .bundle_writer import write_bundle
from .dtypes import DTYPES, dtype_name
from .spec import SPEC_KEY, DimSpec, OpRef, PackageSpec, SpecError, TensorSpec

__all__ = [
    "DTYPES",
    "PACKAGE_NAME",
    "SIGNATURE_NAME",
    "SPEC_KEY",
    "DimSpec",
    "OpRef",
    "PackageSpec",
    "BundleLayout",
    "SpecError",
    "TensorSpec",
    "check_model_file",
    "dtype_name",
    "is_bundle",
    "read_layout",
    "read_package_metadata",
    "read_package_spec",
    "rewrite_package_metadata",
    "write_bundle",
]
