"""The package contract: the spec document (spec.py), its dtype names (dtypes.py),
package files on disk (archive.py) and the host facts a package is checked
against (host.py)."""

from .archive import check_model_file, read_package_metadata, read_package_spec, rewrite_package_metadata
from .dtypes import DTYPES, dtype_name
from .spec import SPEC_KEY, DimSpec, OpRef, PackageSpec, SpecError, TensorSpec

__all__ = [
    "DTYPES",
    "SPEC_KEY",
    "DimSpec",
    "OpRef",
    "PackageSpec",
    "SpecError",
    "TensorSpec",
    "check_model_file",
    "dtype_name",
    "read_package_metadata",
    "read_package_spec",
    "rewrite_package_metadata",
]
