"""The Triton model repository a package becomes (serve/triton_repository.py) and its
CLI, without a server: config.pbtxt from hand-built specs against hand-written text,
parsed back with Triton's own ModelConfig grammar; the bundle layout from the suite's
package; exit codes and messages. The one test that starts tritonserver (an empty
repository) carries the triton mark."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import Build, CompiledPackage, edit_spec, require_triton_server, run_cli
from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.errors import AotiDeployError, PackageError
from aoti_deploy.package import bundle_writer as bundle_module
from aoti_deploy.package.archive import read_package_spec
from aoti_deploy.package.spec import DimSpec, PackageSpec, TensorSpec
from aoti_deploy.serve.served_models import read_repository
from aoti_deploy.serve.triton_config import TensorNames, VersionPolicy, config_text, served_name, triton_config
from aoti_deploy.serve.triton_repository import CONFIG_NAME, default_model_name, model_versions, write_repository

runner = CliRunner()


def tensor(dtype: str, *dims: int | tuple[int, int | None]) -> TensorSpec:
    """A TensorSpec: an int is a static size, a (min, max) pair a dynamic one (max None: unbounded)."""
    return TensorSpec(tuple(DimSpec(d, d) if isinstance(d, int) else DimSpec(*d) for d in dims), dtype)


def parse(text: str):
    """Parse config text with Triton's grammar (tritonclient's ModelConfig)."""
    text_format = pytest.importorskip("google.protobuf.text_format", reason="needs protobuf (the triton extra)")
    model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2", reason="needs the triton extra")
    return text_format.Parse(text, model_config_pb2.ModelConfig())


STATIC_SPEC = PackageSpec(inputs=[tensor("float32", 1, 3, 224, 224)], outputs=[tensor("float32", 1, 3, 224, 224)])
STATIC_CONFIG = """\
name: "identity_conv"
backend: "aoti"
max_batch_size: 0
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 1, 3, 224, 224 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 1, 3, 224, 224 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""

# Two inputs whose dims 0 are one size (a shared group), two outputs that keep it.
BATCHED_SPEC = PackageSpec(
    inputs=[tensor("float16", (1, 8), 3, (1, 64)), tensor("int64", (1, 8), 4)],
    outputs=[tensor("float16", (1, 8), 3, (1, 64)), tensor("bool", (1, 8), 4)],
    shared_dims=[[(0, 0), (1, 0)]],
)
BATCHED_CONFIG = """\
name: "pair"
backend: "aoti"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP16
    dims: [ 3, -1 ]
  },
  {
    name: "INPUT__1"
    data_type: TYPE_INT64
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP16
    dims: [ 3, -1 ]
  },
  {
    name: "OUTPUT__1"
    data_type: TYPE_BOOL
    dims: [ 4 ]
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 250
}
instance_group [
  {
    kind: KIND_CPU
    count: 3
  }
]
parameters: {
  key: "intra_op_threads"
  value: { string_value: "2" }
}
parameters: {
  key: "trusted_key"
  value: { string_value: "/keys/serving key.pub" }
}
"""

# Dynamic height and width, static batch: not batchable, so full dims with -1.
DYNAMIC_HW_SPEC = PackageSpec(
    inputs=[tensor("bfloat16", 2, 3, (1, 64), (1, 64))], outputs=[tensor("bfloat16", 2, 3, (1, 64), (1, 64))]
)
DYNAMIC_HW_CONFIG = """\
name: "hw"
backend: "aoti"
max_batch_size: 0
input [
  {
    name: "INPUT__0"
    data_type: TYPE_BF16
    dims: [ 2, 3, -1, -1 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_BF16
    dims: [ 2, 3, -1, -1 ]
  }
]
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""

# Both dims 0 dynamic, but not recorded as one size: Triton could not batch them.
UNSHARED_SPEC = PackageSpec(
    inputs=[tensor("float64", (1, 8), 5), tensor("float64", (1, 8), 5)],
    outputs=[tensor("float64", (1, 8), 5), tensor("uint8", 7)],
    device="cuda:0",
)
UNSHARED_CONFIG = """\
name: "unshared"
backend: "aoti"
max_batch_size: 0
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP64
    dims: [ -1, 5 ]
  },
  {
    name: "INPUT__1"
    data_type: TYPE_FP64
    dims: [ -1, 5 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP64
    dims: [ -1, 5 ]
  },
  {
    name: "OUTPUT__1"
    data_type: TYPE_UINT8
    dims: [ 7 ]
  }
]
instance_group [
  {
    kind: KIND_GPU
    count: 1
  }
]
"""


@pytest.mark.parametrize(
    "spec, name, options, expected",
    [
        (STATIC_SPEC, "identity_conv", {}, STATIC_CONFIG),
        (BATCHED_SPEC, "pair",
         {"instances": 3, "max_queue_delay_us": 250, "intra_op_threads": 2, "trusted_key": "/keys/serving key.pub"},
         BATCHED_CONFIG),
        (DYNAMIC_HW_SPEC, "hw", {}, DYNAMIC_HW_CONFIG),
        (UNSHARED_SPEC, "unshared", {}, UNSHARED_CONFIG),
    ],
    ids=["static", "batched-two-in-two-out", "dynamic-hw-not-batched", "unshared-dims-gpu"],
)
def test_config_text(spec, name, options, expected):
    text = config_text(spec, name, **options)
    assert text == expected
    parsed = parse(text)  # Triton's own grammar reads it
    assert parsed.name == name and parsed.backend == "aoti"
    assert [i.name for i in parsed.input] == [f"INPUT__{i}" for i in range(len(spec.inputs))]
    assert [o.name for o in parsed.output] == [f"OUTPUT__{k}" for k in range(len(spec.outputs))]


def test_batched_config_values():
    config = triton_config(BATCHED_SPEC, "pair", dynamic_batching=False)
    assert config.batchable and config.max_batch_size == 8
    assert not config.dynamic_batching and "dynamic_batching" not in config.text()
    assert config.batching == "batched on dim 0 (1..8), dynamic batching off"
    assert [(t.name, t.data_type, t.dims) for t in config.inputs] == [
        ("INPUT__0", "TYPE_FP16", (3, -1)), ("INPUT__1", "TYPE_INT64", (4,))]
    assert config.warnings == ()
    parsed = parse(config.text())
    assert parsed.max_batch_size == 8 and not parsed.HasField("dynamic_batching")


def test_an_output_without_the_batch_dim_keeps_the_model_unbatched():
    spec = PackageSpec(inputs=[tensor("float32", (1, 8), 3)], outputs=[tensor("float32", (1, 4), 3)])
    config = triton_config(spec, "m")
    assert config.max_batch_size == 0 and config.outputs[0].dims == (-1, 3)
    assert "output 0's dim 0 (1..4) is not the inputs' batch dim (1..8)" in config.batching


def test_a_batch_dim_tied_to_another_dim_keeps_the_model_unbatched():
    """x [B, 4] and adj [B, B]: merging two requests of B=2 would give adj [4, 2]."""
    spec = PackageSpec(
        inputs=[tensor("float32", (1, 8), 4), tensor("float32", (1, 8), (1, 8))],
        outputs=[tensor("float32", (1, 8), 4)],
        shared_dims=[[(0, 0), (1, 0), (1, 1)]],
    )
    config = triton_config(spec, "m")
    assert config.max_batch_size == 0
    assert "input 1's dim 1 is one size with the batch dim" in config.batching


# One score per example: x [B, 4] and a per-example weight w [B] give scores [B] and the
# weighted features [B, 4]. The two [B] tensors are only their batch dim.
SCORES_SPEC = PackageSpec(
    inputs=[TensorSpec((DimSpec(1, 16), DimSpec(4, 4)), "float32", name="x"),
            TensorSpec((DimSpec(1, 16),), "float32", name="w")],
    outputs=[TensorSpec((DimSpec(1, 16),), "float32", name="scores"),
             TensorSpec((DimSpec(1, 16), DimSpec(4, 4)), "float32", name="weighted")],
    shared_dims=[[(0, 0), (1, 0)]],
)
SCORES_CONFIG = """\
name: "scores"
backend: "aoti"
max_batch_size: 16
input [
  {
    name: "x"
    data_type: TYPE_FP32
    dims: [ 4 ]
  },
  {
    name: "w"
    data_type: TYPE_FP32
    dims: [ 1 ]
    reshape: { shape: [ ] }
  }
]
output [
  {
    name: "scores"
    data_type: TYPE_FP32
    dims: [ 1 ]
    reshape: { shape: [ ] }
  },
  {
    name: "weighted"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 100
}
instance_group [
  {
    kind: KIND_CPU
    count: 1
  }
]
"""


def test_a_tensor_that_is_only_its_batch_dim_is_batched_through_reshape():
    """Triton's convention for a batched model's [batch] tensor: dims [1] reshaped to [],
    so requests and responses carry [batch, 1] and the model sees [batch]."""
    config = triton_config(SCORES_SPEC, "scores")
    assert config.text() == SCORES_CONFIG
    assert [t.reshape for t in config.inputs + config.outputs] == [None, (), (), None]
    assert config.batching == ("batched on dim 0 (1..16); input 1 (w), output 0 (scores) are one value per example, "
                               "[batch, 1] in requests and responses (Triton's reshape)")
    parsed = parse(config.text())
    assert parsed.input[1].HasField("reshape") and list(parsed.input[1].reshape.shape) == []
    assert not parsed.input[0].HasField("reshape") and parsed.output[0].HasField("reshape")
    names = TensorNames.of_spec(SCORES_SPEC)
    assert (names.reshaped_inputs, names.reshaped_outputs) == ((1,), (0,))
    # The server's JSON of the config (protobuf's: int64 dims as strings, the empty shape left out).
    served = {"max_batch_size": 16,
              "input": [{"name": "x", "dims": ["4"]}, {"name": "w", "dims": ["1"], "reshape": {}}],
              "output": [{"name": "scores", "dims": ["1"], "reshape": {"shape": []}},
                         {"name": "weighted", "dims": ["4"]}]}
    assert TensorNames.of_config(served) == names
    # Unbatched, the same tensors keep the package's own shapes.
    unbatched = triton_config(PackageSpec(inputs=[tensor("float32", 8, 4)], outputs=[tensor("float32", 8)]), "m")
    assert unbatched.max_batch_size == 0 and unbatched.outputs[0].dims == (8,) and unbatched.outputs[0].reshape is None
    assert "reshape" not in unbatched.text()


def test_a_batch_of_at_least_two_warns_and_caps_at_int32():
    spec = PackageSpec(inputs=[tensor("float32", (2, 2**40), 3)], outputs=[tensor("float32", (2, 2**40), 3)])
    config = triton_config(spec, "m")
    assert config.max_batch_size == 2**31 - 1
    (warning,) = config.warnings
    assert "fewer than 2 fails" in warning and "--dynamic-dim 0.0=1:" in warning


def test_an_unbounded_batch_caps_at_int32_and_its_warning_gives_an_unbounded_range():
    spec = PackageSpec(inputs=[tensor("float32", (1, None), 3)], outputs=[tensor("float32", (1, None), 3)])
    config = triton_config(spec, "m")
    assert config.max_batch_size == 2**31 - 1 and not config.warnings
    assert "batched on dim 0 (1..unbounded)" in config.batching
    spec = PackageSpec(inputs=[tensor("float32", (2, None), 3)], outputs=[tensor("float32", (2, None), 3)])
    (warning,) = triton_config(spec, "m").warnings
    assert warning.endswith("(export_compile --dynamic-dim 0.0=1:)"), warning


def test_a_scalar_is_refused_unbatched():
    spec = PackageSpec(inputs=[tensor("float32")], outputs=[tensor("float32")])
    with pytest.raises(PackageError, match=r"input 0 \(INPUT__0\) is a scalar \(0-d\)"):
        config_text(spec, "m")


def test_an_unsupported_dtype_names_it_and_the_supported_ones():
    spec = PackageSpec(inputs=[tensor("complex64", 4)], outputs=[tensor("complex64", 4)])
    with pytest.raises(PackageError) as error:
        config_text(spec, "m")
    assert "input 0 (INPUT__0) has dtype complex64, which Triton has no data type for" in str(error.value)
    assert ("bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64, float16, bfloat16, float32, float64"
            in str(error.value))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_dtypes_are_served_with_triton_unsigned_types(dtype: str):
    """AOTInductor takes uint16/32/64 inputs (export, compile and run, bit-exact), and
    Triton has UINT16/32/64: the config declares them."""
    spec = PackageSpec(inputs=[tensor(dtype, 4)], outputs=[tensor(dtype, 4)])
    text = config_text(spec, "m")
    assert f"data_type: TYPE_{dtype.upper()}" in text and "TYPE_UINT8" not in text


def test_a_package_without_recorded_outputs_must_be_re_exported():
    with pytest.raises(PackageError, match="exported before export_compile recorded them") as error:
        config_text(PackageSpec(inputs=[tensor("float32", 4)]), "m")
    assert "Re-export it with export_compile" in str(error.value)


def test_python_only_ops_are_refused():
    spec = PackageSpec(inputs=[tensor("float32", 4)], outputs=[tensor("float32", 4)],
                       python_only_ops=["python_only_example::double", "other::op"])
    with pytest.raises(PackageError) as error:
        config_text(spec, "m")
    assert "python_only_example::double, other::op" in str(error.value)
    assert "runs no Python" in str(error.value)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "has space", "..", "naïve"])
def test_bad_model_names_are_refused(name):
    with pytest.raises(AotiDeployError, match="invalid model name"):
        config_text(STATIC_SPEC, name)


# --- write_repository on the suite's package -------------------------------------------


def test_write_repository_layout(compiled_package: CompiledPackage, op_library: Path, tmp_path: Path):
    repository = tmp_path / "repository"
    written = write_repository(compiled_package.path, repository, name="demo", version=3,
                               op_libraries=[op_library], intra_op_threads=1)
    model_dir = repository / "demo"
    assert sorted(p.name for p in model_dir.iterdir()) == ["3", CONFIG_NAME]
    assert sorted(p.name for p in (model_dir / "3").iterdir()) == ["libidentity_conv_ops.so", "model.pt2"]
    assert written.bundle == model_dir / "3" and written.config_path == model_dir / CONFIG_NAME
    assert not written.signed and written.warnings == []
    spec = read_package_spec(compiled_package.path)
    assert written.config_path.read_text() == config_text(spec, "demo", intra_op_threads=1)
    parsed = parse(written.config_path.read_text())
    # The suite's package: [2, 3, 8, 12] float32, static, so not batched.
    assert parsed.max_batch_size == 0 and list(parsed.input[0].dims) == [2, 3, 8, 12]
    # Served by the names the spec records, else INPUT__0/OUTPUT__0.
    assert written.inputs[0] == (served_name(spec.inputs, 0, "INPUT__"), "TYPE_FP32", (2, 3, 8, 12), None)
    assert written.outputs[0] == (served_name(spec.outputs, 0, "OUTPUT__"), "TYPE_FP32", (2, 3, 8, 12), None)

    # Again, from the written bundle, as another model: the bundle's own libraries go in.
    again = write_repository(written.bundle, repository, name=default_model_name(written.bundle))
    assert again.name == "3" and sorted(p.name for p in again.bundle.iterdir()) == [
        "libidentity_conv_ops.so", "model.pt2"]
    # Rewriting a version replaces it; the replaced folder stays hidden beside it (for a
    # reader that opened it just before the swap), which Triton does not take for a version.
    write_repository(compiled_package.path, repository, name="demo", version=3, op_libraries=[op_library])
    assert sorted(p.name for p in model_dir.iterdir() if not p.name.startswith(".")) == ["3", CONFIG_NAME]
    (hidden,) = [p for p in model_dir.iterdir() if p.name.startswith(".")]
    assert hidden.name.startswith(".3.") and hidden.name.endswith(".tmp")
    assert sorted(p.name for p in (hidden / "3").iterdir()) == ["libidentity_conv_ops.so", "model.pt2"]
    assert "intra_op_threads" not in (model_dir / CONFIG_NAME).read_text()


def test_write_repository_refuses_before_writing(compiled_package: CompiledPackage, op_library: Path,
                                                 tmp_path: Path):
    repository = tmp_path / "repository"
    old = edit_spec(compiled_package.path, tmp_path / "old.pt2", outputs=None)
    with pytest.raises(PackageError, match="exported before export_compile recorded them") as error:
        write_repository(old, repository, name="old", op_libraries=[op_library])
    assert str(error.value).startswith(f"{old}: ")
    python_only = edit_spec(compiled_package.path, tmp_path / "py.pt2", python_only_ops=["python_only_example::double"])
    with pytest.raises(PackageError, match="python_only_example::double"):
        write_repository(python_only, repository, name="py", op_libraries=[op_library])
    with pytest.raises(AotiDeployError, match="whole number, 1 or more"):
        write_repository(compiled_package.path, repository, name="demo", version=0)
    with pytest.raises(PackageError, match="trusted key not found"):
        write_repository(compiled_package.path, repository, name="demo", trusted_key=tmp_path / "none.pub")
    # Library and key errors are write_bundle's, as for the bundle CLI.
    with pytest.raises(PackageError, match="op library not found"):
        write_repository(compiled_package.path, repository, name="demo", op_libraries=[tmp_path / "none.so"])
    with pytest.raises(AotiDeployError):
        write_repository(compiled_package.path, repository, name="demo", sign_key=tmp_path / "none.pem")
    assert not repository.exists()


def test_trusted_key_without_signing_warns(compiled_package: CompiledPackage, op_library: Path, tmp_path: Path):
    key = tmp_path / "serving.pub"
    key.write_text("not checked here: the backend reads it\n")
    written = write_repository(compiled_package.path, tmp_path / "repository", name="demo",
                               op_libraries=[op_library], trusted_key=key)
    assert parse(written.config_path.read_text()).parameters["trusted_key"].string_value == str(key.resolve())
    (warning,) = written.warnings
    assert "the bundle is not signed, so the backend will refuse to load it" in warning


# --- versions: published whole, numbered, pruned, served by policy ---------------------


def test_versions_are_numbered_pruned_and_served_by_policy(compiled_package: CompiledPackage, op_library: Path,
                                                           tmp_path: Path):
    pytest.importorskip("tritonclient.grpc", reason="needs tritonclient (the triton extra)")
    repository = tmp_path / "repository"
    model_dir = repository / "demo"
    first = write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library])
    second = write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library])
    assert (first.version, second.version) == (1, 2) and second.versions == (1, 2) and second.removed == ()
    (served,) = read_repository(repository)
    assert (served.version, served.versions, str(served.policy)) == (2, (2,), "latest:1")  # Triton's default
    # A third, keeping the newest two, served two at a time.
    third = write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library],
                             keep_versions=2, version_policy="latest:2")
    assert (third.version, third.versions, third.removed) == (3, (2, 3), (1,))
    assert sorted(p.name for p in model_dir.iterdir()) == ["2", "3", CONFIG_NAME]  # nothing hidden left
    config = parse(third.config_path.read_text())
    assert config.version_policy.latest.num_versions == 2
    (served,) = read_repository(repository)
    assert (served.version, served.versions, served.bundle) == (3, (2, 3), model_dir / "3")
    # An explicit version below the newest is published and never pruned by its own write.
    fourth = write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library], version=1,
                              keep_versions=1, version_policy="specific:1,3")
    assert (fourth.version, fourth.versions, fourth.removed) == (1, (1, 3), (2,))
    assert list(parse(fourth.config_path.read_text()).version_policy.specific.versions) == [1, 3]
    (served,) = read_repository(repository)
    assert (served.version, served.versions) == (3, (1, 3))
    # A policy that serves nothing there is refused when the repository is read, with the versions it has.
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library], version=3,
                     version_policy="specific:7")
    with pytest.raises(AotiDeployError, match=r"serves none of the versions there \(1, 3\)"):
        read_repository(repository)


@pytest.mark.parametrize("text, expected", [("latest:3", "latest:3"), ("latest", "latest:1"), ("all", "all"),
                                            ("specific:4,2,2", "specific:2,4")])
def test_version_policy_parses(text: str, expected: str):
    assert str(VersionPolicy.parse(text)) == expected


@pytest.mark.parametrize("text", ["latest:0", "latest:x", "all:1", "specific:", "specific:0", "newest:2", ""])
def test_version_policy_refuses_what_triton_would_not_take(text: str):
    with pytest.raises(AotiDeployError, match="expected latest:N .* all, or specific:V1,V2") as raised:
        VersionPolicy.parse(text)
    assert raised.value.kind == "usage"


def test_version_policy_serves_what_triton_serves():
    available = [1, 2, 5, 9]
    assert VersionPolicy("latest", latest=2).served(available) == (5, 9)
    assert VersionPolicy("latest", latest=9).served(available) == (1, 2, 5, 9)
    assert VersionPolicy("all").served(available) == (1, 2, 5, 9)
    assert VersionPolicy("specific", versions=(2, 3)).served(available) == (2,)


def test_model_versions_counts_only_what_triton_counts(tmp_path: Path):
    for name in ("1", "10", "02", "0", ".3.abc.tmp", "x"):
        (tmp_path / name).mkdir()
    (tmp_path / "4").write_text("a file, not a version")
    assert model_versions(tmp_path) == [1, 10]


def test_a_version_being_replaced_never_disappears(compiled_package: CompiledPackage, op_library: Path,
                                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Republishing version 1 while a poller (as Triton's poll mode) watches it: the
    folder is swapped in one step, so every look finds a whole bundle."""
    import threading

    repository = tmp_path / "repository"
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library])
    bundle = repository / "demo" / "1"
    expected = sorted(p.name for p in bundle.iterdir())
    seen: list[list[str]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                seen.append(sorted(p.name for p in bundle.iterdir()))
            except OSError as error:
                seen.append([f"error: {error}"])

    watcher = threading.Thread(target=poll)
    watcher.start()
    replaced = []
    try:
        for _ in range(5):
            before = bundle.stat().st_ino
            write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library], version=1)
            replaced.append(bundle.stat().st_ino != before)  # a new folder, not files rewritten in place
    finally:
        stop.set()
        watcher.join()
    assert all(replaced)
    # A look that opened the old folder just before a swap still finds it whole: the
    # replaced folder is kept (hidden), not emptied under the reader.
    assert seen and all(names == expected for names in seen), [n for n in seen if n != expected][:3]
    model_dir = repository / "demo"
    assert sorted(p.name for p in model_dir.iterdir() if not p.name.startswith(".")) == ["1", CONFIG_NAME]
    assert len([p for p in model_dir.iterdir() if p.name.startswith(".1.")]) == 5  # each younger than a minute
    # Once they are older than STALE_STAGING_SECONDS, the next write removes them.
    monkeypatch.setattr(bundle_module, "STALE_STAGING_SECONDS", 0.0)
    time.sleep(0.01)
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library], version=1)
    assert len([p for p in model_dir.iterdir() if p.name.startswith(".1.")]) == 1  # the one just replaced


def test_a_signed_version_that_does_not_verify_is_never_published(compiled_package: CompiledPackage,
                                                                   op_library: Path, tmp_path: Path):
    pytest.importorskip("model_signing", reason="needs model-signing (the sign extra)")
    import subprocess

    for name in ("a", "b"):
        subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                        tmp_path / f"{name}.pem"], check=True)
        subprocess.run(["openssl", "ec", "-in", tmp_path / f"{name}.pem", "-pubout", "-out", tmp_path / f"{name}.pub"],
                       check=True, capture_output=True)
    repository = tmp_path / "repository"
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library],
                     sign_key=tmp_path / "a.pem", trusted_key=tmp_path / "a.pub")
    before = (repository / "demo" / CONFIG_NAME).read_text()
    # Signed with one key, to be verified with another: refused in staging.
    with pytest.raises(PackageError) as raised:
        write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library],
                         sign_key=tmp_path / "b.pem", trusted_key=tmp_path / "a.pub")
    assert raised.value.kind == "wrong_key", raised.value
    assert sorted(p.name for p in (repository / "demo").iterdir()) == ["1", CONFIG_NAME]
    assert (repository / "demo" / CONFIG_NAME).read_text() == before


# --- aoti-deploy triton-repository -----------------------------------------------------


def test_cli_writes_and_summarises(compiled_package: CompiledPackage, op_library: Path, tmp_path: Path):

    repository = tmp_path / "repository"
    result = runner.invoke(cli_app, ["triton-repository", str(compiled_package.path), "--repository", str(repository),
                                     "--op-lib", str(op_library), "--instances", "2"])
    assert result.exit_code == 0, result.output
    # The default name is the package file's stem.
    assert (repository / "model" / CONFIG_NAME).is_file() and (repository / "model" / "1" / "model.pt2").is_file()
    spec = read_package_spec(compiled_package.path)
    input_name, output_name = served_name(spec.inputs, 0, "INPUT__"), served_name(spec.outputs, 0, "OUTPUT__")
    for words in ("Triton model model, version 1", input_name, output_name, "TYPE_FP32", "[2, 3, 8, 12]",
                  "max_batch_size: 0", "instances: 2 x KIND_CPU", "signed: no",
                  f"wrote {repository / 'model' / CONFIG_NAME}", "--model-repository", "--backend-directory",
                  f"aoti-deploy serve --repository {repository} --model model"):
        assert words in result.output, words


@pytest.mark.parametrize(
    "package, args, message",
    [
        ("suite", ["--name", "bad/name"], "invalid model name 'bad/name'"),
        ("suite", ["--name", ".hidden"], "invalid model name '.hidden'"),
        ("suite", ["--version", "0"], "Invalid value for '--version'"),
        ("suite", ["--version", "two"], "Invalid value for '--version'"),
        ("suite", ["--instances", "0"], "Invalid value for '--instances'"),
        ("missing", [], "error: package not found"),
        ("empty", [], "package is empty"),
    ],
)
def test_cli_bad_options_and_packages_exit_2_and_write_nothing(compiled_package: CompiledPackage, tmp_path: Path,
                                                               package: str, args: list[str], message: str):
    (tmp_path / "empty.pt2").write_bytes(b"")
    path = {"suite": compiled_package.path, "missing": tmp_path / "missing.pt2", "empty": tmp_path / "empty.pt2"}
    result = runner.invoke(cli_app, ["triton-repository", str(path[package]), "--repository", str(tmp_path / "r"),
                                     *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "r").exists()


# --- aoti-deploy serve without a server ------------------------------------------------


def test_serve_triton_usage_errors_exit_2(compiled_package: CompiledPackage, op_library: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("tritonclient.grpc", reason="needs the triton extra")

    result = runner.invoke(cli_app, ["serve", "--repository", str(tmp_path / "none")])
    assert result.exit_code == 2 and "model repository not found" in result.output
    repository = tmp_path / "repository"
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[op_library])
    result = runner.invoke(cli_app, ["serve", "--repository", str(repository), "--model", "other"])
    assert result.exit_code == 2 and "no model 'other'" in result.output
    # A build folder with no backend in it: the message says how to build one.
    monkeypatch.setenv("AOTI_DEPLOY_BUILD_DIR", str(tmp_path / "build"))
    result = runner.invoke(cli_app, ["serve", "--repository", str(repository)])
    assert result.exit_code == 2
    assert "Triton backend not found" in result.output and "./scripts/setup.sh" in result.output


def test_missing_triton_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch):
    import importlib.util

    from aoti_deploy.serve import triton_install

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytriton" else real(name, *a))
    with pytest.raises(triton_install.TritonUnavailableError, match=r"pip install -e '\.\[triton\]'"):
        triton_install.tritonserver_binary()


def test_free_ports_differ():
    from aoti_deploy.serve.loopback import free_ports

    ports = free_ports(5)
    assert len(set(ports)) == 5 and all(0 < port < 65536 for port in ports)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_tensors_cross_numpy_with_their_bits(dtype: str):
    """What infer sends and reads back: bfloat16 through ml_dtypes, NaN payloads kept."""
    pytest.importorskip("ml_dtypes", reason="needs the triton extra (tritonclient's dependency)")
    import torch

    from aoti_deploy.serve.triton_client import _to_numpy, _to_torch
    from aoti_deploy.serve.triton_config import DATATYPES
    from aoti_deploy.verify.bits import compare_bits
    from aoti_deploy.verify.special_values import special_values

    x = special_values((4, 16), getattr(torch, dtype))
    back = _to_torch(_to_numpy(x), DATATYPES[dtype])
    assert compare_bits(back, x).identical


# --- a real tritonserver ------------------------------------------------------------------


@pytest.mark.triton
def test_server_starts_and_stops_by_pid(tmp_path: Path):
    from aoti_deploy.serve import triton_client

    triton_server = require_triton_server()
    repository = tmp_path / "empty_repository"
    repository.mkdir()
    log = tmp_path / "tritonserver.log"
    # No backend is needed for an empty repository: any folder will do.
    with triton_server.TritonServer().start(repository, backend_dir=tmp_path, log_file=log) as server:
        server.wait_ready(60)
        pid = server.pid
        assert server.running() and Path(f"/proc/{pid}").exists()
        assert server.http_url.startswith("http://127.0.0.1:") and server.grpc_url.startswith("127.0.0.1:")
        assert triton_client.model_states(server.http_url) == []
        assert server.rss_bytes() > 1 << 20
        assert any(path.endswith("/tritonserver") for path in server.mapped_objects())
    assert server.process.returncode == 0  # SIGTERM: a clean shutdown
    assert not Path(f"/proc/{pid}").exists()
    assert server.stop() == 0  # again: nothing to do
    assert log.stat().st_size > 0


@pytest.mark.triton
def test_a_server_that_exits_fails_fast_with_its_log(tmp_path: Path):
    from aoti_deploy.serve import triton_client

    triton_server = require_triton_server()
    server = triton_server.TritonServer().start(tmp_path, backend_dir=tmp_path, log_file=tmp_path / "log",
                                                extra_args=["--no-such-flag"])
    try:
        with pytest.raises(triton_client.ServingError) as error:
            server.wait_ready(60)
    finally:
        server.stop()
    assert error.value.kind == "exited" and "tritonserver exited (code 1) before it was ready" in str(error.value)
    assert not os.path.exists(f"/proc/{server.pid}")


@pytest.mark.triton
def test_serve_triton_checks_a_repository_end_to_end(compiled_package: CompiledPackage, build: Build,
                                                      tmp_path: Path):
    """aoti-deploy serve as a user runs it (a subprocess: it loads the bundle's op library for
    its Python reference): the suite's package served and bit-checked, then stopped; a
    model that cannot load is exit 2 with Triton's reason."""
    require_triton_server()
    repository = tmp_path / "repository"
    write_repository(compiled_package.path, repository, name="demo", op_libraries=[build.op_library])
    # The same package with names in its spec: served, and checked, by those names.
    spec = read_package_spec(compiled_package.path)
    named_package = edit_spec(compiled_package.path, tmp_path / "named.pt2",
                              inputs=[named(t, "pixels").to_document() for t in spec.inputs],
                              outputs=[named(t, "restored").to_document() for t in spec.outputs])
    write_repository(named_package, repository, name="named_demo", op_libraries=[build.op_library])
    assert 'name: "pixels"' in (repository / "named_demo" / CONFIG_NAME).read_text()
    # As a model that returns {"restored": ...}: its check lines name the output.
    by_name = edit_spec(named_package, tmp_path / "by_name.pt2", outputs_by_name=True)
    write_repository(by_name, repository, name="by_name_demo", op_libraries=[build.op_library])
    result = run_cli("aoti-deploy", "serve", "--repository", repository, "--requests", "2",
                     "--log-file", tmp_path / "server.log", cwd=tmp_path, build=build)
    assert result.returncode == 0, result.stdout + result.stderr
    for words in ("http demo random seed 1 [2, 3, 8, 12] vs inputs: output[0] identical",
                  "grpc demo special values [2, 3, 8, 12] vs Python runtime: output[0] identical",
                  "demo: 6 inferences in 6 executions", "PASSED",
                  "grpc named_demo special values [2, 3, 8, 12] vs Python runtime: output[0] identical",
                  "named_demo: 6 inferences in 6 executions",
                  "grpc by_name_demo special values [2, 3, 8, 12] vs Python runtime: output 'restored' identical"):
        assert words in result.stdout, words
    stopped = re.search(r"stopped tritonserver pid (\d+) \(exit code 0\)", result.stdout)
    assert stopped and not Path(f"/proc/{stopped.group(1)}").exists(), result.stdout

    (repository / "demo" / "1" / "libidentity_conv_ops.so").unlink()
    result = run_cli("aoti-deploy", "serve", "--repository", repository, "--log-file", tmp_path / "server.log",
                     cwd=tmp_path, build=build)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error: model demo (version 1) did not load: " in result.stderr
    assert "libidentity_conv_ops.so" in result.stderr
    started = re.search(r"tritonserver pid (\d+)", result.stdout)
    assert started and not Path(f"/proc/{started.group(1)}").exists()


def named(spec: TensorSpec, name: str) -> TensorSpec:
    return TensorSpec(spec.dims, spec.dtype, spec.values, name)


def test_a_named_package_is_served_by_its_names():
    """The spec's names are the config's; a package without names keeps INPUT__i/OUTPUT__i."""
    spec = PackageSpec(
        inputs=[named(tensor("int64", (1, 8), 16), "input_ids"), named(tensor("int64", (1, 8), 16), "attention_mask")],
        outputs=[named(tensor("float32", (1, 8), 16, 32), "last_hidden_state"),
                 named(tensor("float32", (1, 8), 2), "logits")],
        shared_dims=[[(0, 0), (1, 0)]],
    )
    config = triton_config(spec, "bert")
    assert [(t.name, t.data_type, t.dims) for t in config.inputs] == [
        ("input_ids", "TYPE_INT64", (16,)), ("attention_mask", "TYPE_INT64", (16,))]
    assert [t.name for t in config.outputs] == ["last_hidden_state", "logits"]
    parsed = parse(config.text())
    assert [i.name for i in parsed.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in parsed.output] == ["last_hidden_state", "logits"]
    assert parsed.max_batch_size == 8


def test_a_named_scalar_is_refused_by_its_name():
    spec = PackageSpec(inputs=[named(tensor("float32"), "temperature")], outputs=[named(tensor("float32"), "y")])
    with pytest.raises(PackageError, match=r"input 0 \(temperature\) is a scalar \(0-d\)"):
        config_text(spec, "m")
