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


def test_a_tensor_file_whose_pickle_stores_memo_entry_1_3_billion_is_refused_before_torch_allocates(
        build, compiled_package, tmp_path):
    """A 1 KB tensor file whose pickle stores its first value as memo entry 1,258,291,201
    (LONG_BINPUT): libtorch's unpickler grew its memo to that many entries, 20 GB
    (fuzz_tensor_file: out-of-memory). The runner now refuses a memo id past the next
    one, as a pickler numbers its entries 0, 1, 2, ..."""
    crafted = CORPUS / "tensor_file" / "17749bb91533cd4822640e9caf602bdb2bdc1ac3"
    assert crafted.stat().st_size < 2048
    code, output = run_cpp_runtime(build.runner, compiled_package.path, build.op_library, crafted,
                                   tmp_path / "out.pt")
    assert code == 2, output
    assert "is not a tensor file" in output and "memo entry 1258291201" in output, output
    assert "only 0 were stored before it" in output, output
