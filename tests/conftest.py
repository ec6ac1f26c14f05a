"""Session fixtures shared by the whole suite: the build (checked once), the op
library (loaded once), and one AOTI package compiled once through the real CLI."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from typer.testing import CliRunner

from aoti_deploy.cli.export_compile import app as export_compile_app
from aoti_deploy.ops import load_op_library
from aoti_deploy.runtime.tensor_files import save_tensors
from preforked import Preforked

REPO_ROOT = Path(__file__).resolve().parents[1]

# A trusted key in the developer's shell would make every runner refuse the suite's
# bare packages; the signed-bundle tests set it where they mean to.
os.environ.pop("AOTI_DEPLOY_TRUSTED_KEY", None)

# Not square and batch > 1, so a transposed or truncated read cannot pass.
PACKAGE_SHAPE = (2, 3, 8, 12)

# Tests that need a GPU carry this mark. Without a GPU they are skipped with the reason
# below; scripts/gpu_check.sh sets AOTI_DEPLOY_REQUIRE_CUDA=1, which turns a missing
# GPU into an error instead, so a GPU run can never pass by skipping.
requires_cuda = pytest.mark.cuda
CUDA_SKIP_REASON = "needs a CUDA device"


# Whether a collected test uses the zoo (its compiles then start with the session).
_ZOO_WANTED = False


# The longest test files, longest first (their tests' times in a fresh-clone run). In
# scripts/test.sh's parallel run a file goes to one worker, in this order
# (--no-loadscope-reorder): a long file handed out last would leave the other worker
# idle at the end. The others follow in their own order.
LONGEST_FIRST = (
    "test_triton.py", "test_speed_settings.py", "test_signed_bundles.py", "test_user_models.py",
    "test_performance.py", "test_real_models.py", "test_quantize.py", "test_api.py", "test_docs.py",
    "test_index_guards.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    global _ZOO_WANTED
    _ZOO_WANTED = any("zoo" in getattr(item, "fixturenames", ()) for item in items)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's tests keep their order
    if torch.cuda.is_available():
        return
    if os.environ.get("AOTI_DEPLOY_REQUIRE_CUDA") == "1":
        raise pytest.UsageError(
            "AOTI_DEPLOY_REQUIRE_CUDA=1, but torch.cuda.is_available() is false "
            f"(torch {torch.__version__}); the CUDA tests cannot run here"
        )
    skip = pytest.mark.skip(reason=CUDA_SKIP_REASON)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


def skip_or_fail_without_triton(reason: str) -> None:
    """A missing triton extra or backend skips a test, unless
    AOTI_DEPLOY_REQUIRE_TRITON=1 (scripts/test.sh sets it), which makes it a failure:
    CI cannot pass by skipping the serving tests."""
    if os.environ.get("AOTI_DEPLOY_REQUIRE_TRITON") == "1":
        pytest.fail(f"AOTI_DEPLOY_REQUIRE_TRITON=1, but {reason}")
    pytest.skip(reason)


def require_triton_server():
    """serve.triton_server, once the triton extra (pytriton's tritonserver, tritonclient)
    is known to be installed; else a skip that says how to install it, or a failure
    under AOTI_DEPLOY_REQUIRE_TRITON=1."""
    from aoti_deploy.serve import triton_install, triton_server

    try:
        triton_install.tritonserver_binary()
        triton_install.require_triton_client()
    except triton_install.TritonUnavailableError as error:
        skip_or_fail_without_triton(str(error))
    return triton_server


def require_transformers() -> None:
    """Skip without the hf extra, or fail where ./scripts/test.sh asks for it
    (AOTI_DEPLOY_REQUIRE_HF=1): CI must not pass by skipping the model zoo."""
    try:
        import transformers  # noqa: F401
    except ImportError as error:
        reason = f"needs the hf extra (pip install -e '.[hf]'): {error}"
        if os.environ.get("AOTI_DEPLOY_REQUIRE_HF") == "1":
            pytest.fail(f"AOTI_DEPLOY_REQUIRE_HF=1, but {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


# --- one value per run, across the workers of a parallel run ---------------------------
# scripts/test.sh runs the suite in two pytest-xdist workers, each with its own session.
# A compile that tests in both need is made once: by the worker that asks first.

T = TypeVar("T")


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every worker of a parallel run shares (xdist gives each worker its
    own basetemp in it), or None in a serial run."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    return tmp_path_factory.getbasetemp().parent


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """A session fixture's value, made once per run. In a serial run, make(a new
    folder). In a parallel one, the first worker to ask makes it in a shared folder
    while holding a lock, and keeps it pickled; a worker that asks later waits on the
    lock, then takes the same value. A make that raises leaves no value: the next
    worker makes it again, and fails in its own tests too."""
    root = shared_root(tmp_path_factory)
    if root is None:
        return make(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    made = root / f"{name}.pickle"
    with FileLock(str(root / f"{name}.lock")):
        if made.exists():
            return pickle.loads(made.read_bytes())
        out = root / name
        out.mkdir(exist_ok=True)
        value = make(out)
        staged = root / f"{name}.pickle.partial"
        staged.write_bytes(pickle.dumps(value))
        staged.replace(made)
        return value


@dataclass(frozen=True)
class Build:
    dir: Path
    op_library: Path
    runner: Path
    # The second op library (examples/extra_ops, namespace extra_ops).
    extra_op_library: Path


@dataclass(frozen=True)
class CompiledPackage:
    path: Path
    cli_exit_code: int
    cli_output: str
    input_file: Path
    inputs: list[torch.Tensor]


@pytest.fixture(scope="session")
def build() -> Build:
    """The CMake build, brought up to date once per session (a no-op after setup.sh)."""
    build_dir = (REPO_ROOT / os.environ.get("AOTI_DEPLOY_BUILD_DIR", "build")).resolve()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    if not (build_dir / "build.ninja").exists():
        subprocess.run(
            ["cmake", "-S", REPO_ROOT, "-B", build_dir, "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}"],
            check=True, env=env,
        )
    subprocess.run(["cmake", "--build", build_dir], check=True, env=env, capture_output=True)
    result = Build(
        build_dir, build_dir / "libidentity_conv_ops.so", build_dir / "aoti_runner", build_dir / "libextra_ops.so"
    )
    assert result.op_library.is_file() and result.runner.is_file() and result.extra_op_library.is_file()
    return result


@pytest.fixture(scope="session")
def op_library(build: Build) -> Path:
    return load_op_library(build.op_library)


@pytest.fixture(scope="session")
def compiled_package(tmp_path_factory: pytest.TempPathFactory, op_library: Path) -> CompiledPackage:
    """The one AOTI compile of the suite, made by the export_compile CLI itself."""
    return once_per_run(tmp_path_factory, "package", lambda out_dir: _compile_package(out_dir, op_library))


def _compile_package(out_dir: Path, op_library: Path) -> CompiledPackage:
    package = out_dir / "model.pt2"
    batch, channels, height, width = PACKAGE_SHAPE
    result = CliRunner().invoke(
        export_compile_app,
        ["--batch", str(batch), "--channels", str(channels), "--height", str(height),
         "--width", str(width), "--output", str(package), "--op-lib", str(op_library)],
    )
    generator = torch.Generator().manual_seed(7)
    inputs = [torch.randn(PACKAGE_SHAPE, generator=generator)]
    input_file = save_tensors(out_dir / "input.pt", inputs)
    # Fail here, once and clearly, rather than in every test that uses the package.
    assert result.exit_code == 0, result.output
    return CompiledPackage(package, result.exit_code, result.output, input_file, inputs)


@dataclass(frozen=True)
class QuickstartRun:
    out_dir: Path
    result: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def api_quickstart(tmp_path_factory: pytest.TempPathFactory, build: Build) -> QuickstartRun:
    """examples/api_quickstart.py run once, as a user would from the checkout: it
    exports, calls, verifies, bundles and writes a Triton repository. Its module is
    imported by name (not run as a script), so its Scorer package has the compile-cache
    key of any import of examples.api_quickstart: the docs' API example reuses it."""
    def run(out_dir: Path) -> QuickstartRun:
        result = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from examples.api_quickstart import main; "
             "main(Path(sys.argv[1]))", str(out_dir)],
            capture_output=True, text=True, timeout=900, cwd=REPO_ROOT,
        )
        return QuickstartRun(out_dir, result)

    return once_per_run(tmp_path_factory, "api_quickstart", run)


# --- bring-your-own-model packages (test_user_models.py, test_install.py) ------------

@dataclass(frozen=True)
class UserPackage:
    path: Path
    reference: Path
    exit_code: int
    output: str


def _export(args: list[str]) -> tuple[int, str]:
    # Models are imported from the checkout (examples/...), as a user's from their folder.
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    result = CliRunner().invoke(export_compile_app, args + ["--no-show-graph"])
    return result.exit_code, result.output


def _export_model_package(out: Path, args: list[str]) -> UserPackage:
    """export_compile of a native-ops model with a saved reference, with default flags:
    Inductor may reorder a reduction's float math, and torch.testing's tolerance (the
    default for a model that is not an identity) allows for that. The package is written."""
    code, output = _export(args + ["--save-reference", str(out / "ref"), "--output", str(out / "model.pt2")])
    assert code == 0 and (out / "model.pt2").is_file(), output
    return UserPackage(out / "model.pt2", out / "ref", code, output)


@pytest.fixture(scope="session")
def scale_shift(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """Two inputs, two outputs, batch dynamic in 1..64, native ops only: no op library."""
    return once_per_run(tmp_path_factory, "scale_shift", lambda out: _export_model_package(out, [
        "--model", "examples.user_models:scale_shift_model", "--input-shape", "4,16", "--input-shape", "16",
        "--dynamic-dim", "0.0=1:64"]))


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """Two inputs sharing one dynamic batch, a dict output holding a list
    (examples/user_models.py's pair_model)."""
    return once_per_run(tmp_path_factory, "pair", lambda out: _export_model_package(out, [
        "--model", "examples.user_models:pair_model", "--input-shape", "3,5", "--input-shape", "3,5",
        "--dynamic-dim", "0.0,1.0=1:32"]))


@pytest.fixture(scope="session")
def two_library(tmp_path_factory: pytest.TempPathFactory, build: Build, op_library: Path) -> UserPackage:
    """Custom ops from two libraries; the factory returns its own example input."""
    def make(out: Path) -> UserPackage:
        code, output = _export([
            "--model", "examples.user_models:two_library_model", "--model-arg", "shift=0.25",
            "--op-lib", str(build.op_library), "--op-lib", str(build.extra_op_library),
            "--fake-module", "examples.extra_ops_fakes", "--dynamic-dim", "0.0=1:16",
            "--save-reference", str(out / "ref"), "--output", str(out / "model.pt2"),
        ])
        return UserPackage(out / "model.pt2", out / "ref", code, output)

    return once_per_run(tmp_path_factory, "two_library", make)


@pytest.fixture(scope="session")
def digits_int8(tmp_path_factory: pytest.TempPathFactory):
    """examples/quant_models.py's digits CNN as an int8 package (quantize="int8", 8
    calibration batches of 60): tests/test_quantize.py and the Triton tests share it."""
    import aoti_deploy as ad
    from examples.quant_models import calibration, digits_cnn

    model, args = digits_cnn()
    out = tmp_path_factory.mktemp("digits") / "digits_int8.pt2"
    return ad.export(model, args, quantize="int8", calibration=calibration(), package_path=out)


@pytest.fixture(scope="session")
def score_package(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """The one package whose tensors are only their batch dim (examples.user_models'
    score_model: a per-example weight w [B] in, one score per example [B] out), batch
    1..16: Triton serves it batched through reshape."""
    return once_per_run(tmp_path_factory, "score", lambda out: _export_model_package(out, [
        "--model", "examples.user_models:score_model", "--dynamic-dim", "0.0,1.0=1:16"]))


# LookupModel's batch, shared by its four integer inputs (examples/index_models.py).
LOOKUP_DYNAMIC_BATCH = "0.0,1.0,2.0,3.0=1:8"


@pytest.fixture(scope="session")
def lookup_package(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """The one package whose integer inputs index tensors (embedding, index_select,
    gather, tensor indexing), batch 1..8: compiled once for the value-range tests and
    the Triton test."""
    def make(out: Path) -> UserPackage:
        code, output = _export([
            "--model", "examples.index_models:lookup_model", "--dynamic-dim", LOOKUP_DYNAMIC_BATCH,
            "--save-reference", str(out / "ref"), "--output", str(out / "model.pt2"),
        ])
        assert code == 0, output
        return UserPackage(out / "model.pt2", out / "ref", code, output)

    return once_per_run(tmp_path_factory, "lookup", make)


@pytest.fixture(scope="session")
def computed_index_package(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """The one package whose indices are computed from its inputs before they index
    (embedding, take, scatter, scatter_add, index_put, index_select, tensor indexing,
    gather, embedding_bag), batch 1..8: for the index-check tests and the Triton test."""
    def make(out: Path) -> UserPackage:
        code, output = _export([
            "--model", "examples.index_models:computed_index_model", "--dynamic-dim", "0.0,1.0,2.0,3.0,4.0,5.0,6.0,7.0=1:8",
            "--output", str(out / "model.pt2"),
        ])
        assert code == 0, output
        return UserPackage(out / "model.pt2", out / "ref", code, output)

    return once_per_run(tmp_path_factory, "computed_index", make)


@pytest.fixture(scope="session")
def late_index_package(tmp_path_factory: pytest.TempPathFactory) -> UserPackage:
    """The package whose indices become indexing only in Inductor's decompositions
    (cross_entropy's gather), follow a two-dim bool mask, or are read with .item()."""
    def make(out: Path) -> UserPackage:
        code, output = _export(["--model", "examples.index_models:late_index_model", "--output", str(out / "model.pt2")])
        assert code == 0, output
        return UserPackage(out / "model.pt2", out / "ref", code, output)

    return once_per_run(tmp_path_factory, "late_index", make)


def run_cmd(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command with text output captured; never raises on a non-zero exit."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)


def run_cli(name: str, *args: object, cwd: Path, build: Build, **env: str | None) -> subprocess.CompletedProcess[str]:
    """A toolkit CLI (its console script in this venv) as a process from ``cwd`` (forked
    from one that has imported torch: tests/preforked.py),
    with the session's build as $AOTI_DEPLOY_BUILD_DIR, as ./scripts/test.sh sets
    it, and nothing else pointing at the build. ``env`` adds variables; None removes one."""
    environment = {**os.environ, "AOTI_DEPLOY_BUILD_DIR": str(build.dir)}
    environment.pop("AOTI_DEPLOY_OPS_LIB", None)
    for key, value in env.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    return PREFORKED.run(name, [str(a) for a in args], cwd=cwd, env=environment, timeout=300)


# The console scripts' processes fork from one that has imported torch (tests/preforked.py).
PREFORKED = Preforked(Path(sys.executable).parent)


def pytest_unconfigure(config: pytest.Config) -> None:
    PREFORKED.stop()


def run_python_runtime(package: Path, op_lib: Path, inputs: Path | None, outputs: Path) -> tuple[int, str]:
    """run_inference through typer's CliRunner; returns (exit code, output)."""
    from aoti_deploy.cli.run_inference import app as run_inference_app

    args = [str(package), str(op_lib), "--outputs", str(outputs)]
    if inputs is not None:
        args += ["--inputs", str(inputs)]
    result = CliRunner().invoke(run_inference_app, args)
    return result.exit_code, result.output


def run_cpp_runtime(runner: Path, package: Path, op_lib: Path, inputs: Path | None, outputs: Path) -> tuple[int, str]:
    """aoti_runner as a subprocess; returns (exit code, stdout + stderr). Never an abort."""
    args = [runner, package, op_lib, "--outputs", outputs] + (["--inputs", inputs] if inputs is not None else [])
    result = run_cmd(*args)
    assert "terminate called" not in result.stderr
    return result.returncode, result.stdout + result.stderr


def run_both_runtimes(build: Build, op_lib: Path, package: Path, x: torch.Tensor, tmp: Path
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``x`` through the package in Python and in C++ (both must exit 0) and
    return their outputs, read back from the tensor files."""
    inputs = save_tensors(tmp / "both_in.pt", [x])
    code, output = run_python_runtime(package, op_lib, inputs, tmp / "py.pt")
    assert code == 0, output
    code, output = run_cpp_runtime(build.runner, package, op_lib, inputs, tmp / "cpp.pt")
    assert code == 0, output
    return torch.load(tmp / "py.pt")[0], torch.load(tmp / "cpp.pt")[0]


def _run_matrix_in_worker(work_dir: str, runner: str, op_library: str, dtypes: tuple[str, ...], onnx: bool) -> list:
    from aoti_deploy.bench.parity import run_matrix

    return run_matrix(Path(work_dir), Path(runner), Path(op_library), dtypes=dtypes, onnx=onnx)


@pytest.fixture(scope="session")
def parity_matrix(tmp_path_factory: pytest.TempPathFactory, build: Build, op_library: Path):
    """The full parity matrix, once: 4 dtypes x static/dynamic x random/special, with
    the ONNX column when the ONNX extra is installed. Its packages (e.g.
    model_float32_dynamic.pt2) are shared with other tests. Half the dtypes run in a
    worker process while this one runs the other half (two cores)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from aoti_deploy.bench.parity import run_matrix
    from aoti_deploy.package.dtypes import DTYPES
    from aoti_deploy.runtime.onnx_extra import missing_onnx_packages

    def make(work_dir: Path):
        onnx = not missing_onnx_packages()
        dtypes = tuple(DTYPES)
        here, there = dtypes[: len(dtypes) // 2], dtypes[len(dtypes) // 2:]
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            elsewhere = pool.submit(_run_matrix_in_worker, str(work_dir), str(build.runner), str(op_library), there,
                                    onnx)
            results = run_matrix(work_dir, build.runner, op_library, dtypes=here, onnx=onnx)
            results += elsewhere.result()
        return work_dir, results

    return once_per_run(tmp_path_factory, "parity", make)


@pytest.fixture(scope="session")
def dynamic_package(parity_matrix) -> Path:
    """float32, batch 1..8, height and width 1..64 (see aoti_deploy.bench.parity)."""
    work_dir, _ = parity_matrix
    return work_dir / "model_float32_dynamic.pt2"


def rewrite_metadata(source: Path, target: Path, changes: dict[str, str | None]) -> Path:
    """Copy an AOTI package, editing the metadata JSON files it carries: a value of
    None deletes the key. Used to craft packages from other devices and hosts."""
    from aoti_deploy.package.archive import rewrite_package_metadata

    return rewrite_package_metadata(source, target, changes)


def edit_spec(source: Path, target: Path, aoti: dict[str, str | None] | None = None, **fields: object) -> Path:
    """Copy a package, setting fields of its spec document (and AOTI entries): a
    value of None deletes the field. Crafts packages for other hosts, or malformed ones."""
    import json

    from aoti_deploy.package.archive import read_package_metadata
    from aoti_deploy.package.spec import SPEC_KEY

    document = json.loads(read_package_metadata(source)[SPEC_KEY])
    for key, value in fields.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return rewrite_metadata(source, target, {SPEC_KEY: json.dumps(document), **(aoti or {})})


def legacy_package(source: Path, target: Path) -> Path:
    """The package as the writer before the spec document wrote it: one
    ``aoti_deploy.<field>`` entry per field, in the old grammar, and no document."""
    from aoti_deploy.package.archive import read_package_spec
    from aoti_deploy.package.spec import SPEC_KEY

    spec = read_package_spec(source)
    entries = {
        "format": "1",
        "inputs": ";".join(f"{t.dtype}:" + ",".join(str(d) for d in t.dims) for t in spec.inputs),
        "device": spec.device,
        "required_ops": ",".join(op.name for op in spec.required_ops),
        "required_classes": ",".join(spec.required_classes),
        "op_libraries": ",".join(spec.op_libraries),
        "is_identity": "1" if spec.is_identity else "0",
        "torch_version": spec.torch_version,
        "example_shapes": ";".join(",".join(map(str, shape)) for shape in spec.example_shapes),
        "cpu_flags": " ".join(spec.cpu_flags),
        "python_only_ops": ",".join(spec.python_only_ops),
        "fake_modules": ",".join(spec.fake_modules),
        "optimizations": spec.optimizations,
        "shared_dims": ";".join(",".join(f"{i}.{d}" for i, d in group) for group in spec.shared_dims),
    }
    return rewrite_metadata(source, target, {SPEC_KEY: None, **{f"aoti_deploy.{k}": v for k, v in entries.items()}})


# --- the model zoo (tests/test_zoo.py, tests/test_triton.py) -------------------------

def _zoo_factories() -> dict:
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from examples.hf_models import FACTORIES

    return FACTORIES


TEXT = ("bert", "gpt2", "t5_encoder")
IMAGES = ("vit", "resnet")
ZOO = TEXT + IMAGES
# The inputs and the first outputs each package must be named by.
NAMES = {
    "bert": (["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"]),
    "gpt2": (["input_ids", "attention_mask"], ["logits"]),
    "t5_encoder": (["input_ids", "attention_mask"], ["last_hidden_state"]),
    "vit": (["pixel_values"], ["last_hidden_state", "pooler_output"]),
    "resnet": (["pixel_values"], ["last_hidden_state", "pooler_output"]),
}


@dataclass
class ZooModel:
    name: str
    model: torch.nn.Module
    kwargs: dict[str, torch.Tensor]
    package: object  # an aoti_deploy.Package


def _dynamic_shapes(name: str, kwargs: dict[str, torch.Tensor]) -> dict[str, dict[int, object]]:
    import aoti_deploy as ad

    batch = ad.Dim("batch", min=1, max=8)
    if name in TEXT:
        sequence = ad.Dim("sequence", min=2, max=64)
        return {key: {0: batch, 1: sequence} for key in kwargs}
    return {"pixel_values": {0: batch}}


def _export_zoo(names: tuple[str, ...], out: str) -> dict[str, ZooModel]:
    """Export the zoo's ``names`` into ``out``: the zoo fixture's work, also done in a
    worker process (whose results are only its files)."""
    import aoti_deploy

    factories = _zoo_factories()
    built = {}
    for name in names:
        model, kwargs = factories[name](keywords=True)
        package = aoti_deploy.export(model, (), kwargs, dynamic_shapes=_dynamic_shapes(name, kwargs),
                                     package_path=Path(out) / f"{name}.pt2")
        built[name] = ZooModel(name, model, kwargs, package)
    return built


def _export_zoo_in_worker(names: tuple[str, ...], out: str) -> None:
    """A worker process's body: the exports, or the traceback in out/worker_error.txt."""
    try:
        _export_zoo(names, out)
    except BaseException:
        import traceback

        (Path(out) / "worker_error.txt").write_text(traceback.format_exc())
        raise
    (Path(out) / "done").touch()


@pytest.fixture(scope="session", autouse=True)
def _zoo_prefetch(tmp_path_factory: pytest.TempPathFactory):
    """When a collected test uses the zoo, its five compiles start with the session in
    a worker process, on the core the mostly single-threaded tests leave free; the zoo
    fixture, much later in the run, then finds the packages built. A worker still
    running at the session's end is stopped. In a parallel run only the first pytest
    worker starts it, in the shared folder; the others yield (folder, None) and wait
    for its files."""
    import importlib.util
    import multiprocessing

    if not _ZOO_WANTED or importlib.util.find_spec("transformers") is None:
        yield None
        return
    root = shared_root(tmp_path_factory)
    if root is None:
        out = tmp_path_factory.mktemp("zoo")
    else:
        out = root / "zoo"
        try:
            out.mkdir()
        except FileExistsError:  # another pytest worker started the exports
            yield out, None
            return
    worker = multiprocessing.get_context("spawn").Process(target=_export_zoo_in_worker, args=(ZOO, str(out)),
                                                        name="zoo exports")
    worker.start()
    yield out, worker
    if root is not None:
        worker.join(timeout=1800)  # another pytest worker may still be waiting for it
    if worker.is_alive():
        worker.terminate()
    worker.join(timeout=60)


def _wait_for_any(*paths: Path, timeout: float) -> None:
    """Until one of paths exists, checked twice a second; fails at the timeout."""
    import time

    deadline = time.monotonic() + timeout
    while not any(path.exists() for path in paths):
        assert time.monotonic() < deadline, f"none of {', '.join(map(str, paths))} appeared in {timeout:.0f} s"
        time.sleep(0.5)


@pytest.fixture(scope="session")
def zoo(_zoo_prefetch) -> dict[str, ZooModel]:
    """The zoo's packages, exported through the API once per session (one compile
    each), shared by tests/test_zoo.py and the Triton tests. The compiles ran in the
    worker _zoo_prefetch started; each export here finds its package built from the
    same inputs at its path (the export cache's hit, which verifies it against eager
    again)."""
    require_transformers()
    assert _zoo_prefetch is not None, "the zoo's worker was not started"
    out, worker = _zoo_prefetch
    error = out / "worker_error.txt"
    if worker is not None:
        worker.join(timeout=1800)
        exit_code = worker.exitcode
    else:  # started by another pytest worker: its process leaves "done" or the traceback
        _wait_for_any(out / "done", error, timeout=1800)
        exit_code = 0 if (out / "done").exists() else 1
    assert exit_code == 0, f"the zoo's exports failed (exit {exit_code}):\n" + (
        error.read_text() if error.exists() else "no traceback written")
    built = _export_zoo(ZOO, str(out))
    for name in ZOO:
        assert built[name].package.result is not None and built[name].package.result.cached, name
    return built


def zoo_other_shape(name: str) -> dict[str, torch.Tensor]:
    """Inputs at another batch and sequence (or image batch) than the example."""
    factories = _zoo_factories()
    _, kwargs = factories[name](batch=3, sequence=7, seed=5, keywords=True) if name in TEXT else \
        factories[name](batch=3, seed=5, keywords=True)
    return kwargs




# --- models that return Python scalars (tests/test_scalar_outputs.py, tests/test_triton.py) ---

@dataclass
class ScalarPackages:
    # PyTorch's own test_symint_item model (examples/scalar_models.py), static.
    item: object  # an aoti_deploy.Package
    # BatchStats: a tensor and every kind of scalar output in a dict, rows 1..16.
    stats: object


@pytest.fixture(scope="session")
def scalar_packages(tmp_path_factory: pytest.TempPathFactory) -> ScalarPackages:
    """The scalar-output packages, exported through the API once per session."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import aoti_deploy
    from examples.scalar_models import BatchStats, SymIntItem, batch_stats_inputs, symint_item_inputs

    out = tmp_path_factory.mktemp("scalars")
    item = aoti_deploy.export(SymIntItem(), symint_item_inputs(), package_path=out / "symint_item.pt2")
    stats = aoti_deploy.export(BatchStats(), batch_stats_inputs(), package_path=out / "batch_stats.pt2",
                               dynamic_shapes=({0: aoti_deploy.Dim("rows", min=1, max=16)}, None))
    return ScalarPackages(item, stats)
