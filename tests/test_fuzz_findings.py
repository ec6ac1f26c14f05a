"""What the fuzz targets (cpp_runtime/fuzz) found, kept as regular tests: each input
is in the target's seed corpus (tests/fuzz_corpus/), so scripts/fuzz.sh replays it
too, and here the runner that reads such a file must refuse it cleanly."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cpp_runtime

CORPUS = Path(__file__).parent / "fuzz_corpus"


def test_a_tensor_file_whose_pickle_declares_4_gb_is_refused_before_torch_allocates(build, compiled_package, tmp_path):
    """A 1.6 KB tensor file whose pickle declares a 4 GB string: libtorch's unpickler
    reserved the declared length before reading it (fuzz_tensor_file: out-of-memory).
    The runner now checks every declared length against the pickle's size first."""
    crafted = CORPUS / "tensor_file" / "b052a8d95298704beb41ae09acc444794caf7a89"
    assert crafted.stat().st_size < 2048
    code, output = run_cpp_runtime(build.runner, compiled_package.path, build.op_library, crafted,
                                   tmp_path / "out.pt")
    assert code == 2, output
    assert "is not a tensor file" in output and "declares" in output and "bytes" in output, output
