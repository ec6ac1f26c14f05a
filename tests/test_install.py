"""`cmake --install build --prefix DIR` gives a self-contained C++ runtime: DIR/bin/aoti_runner
and DIR/lib with the op libraries and exactly the shared libraries they need. Proven the
hard way: the installed runner, in an empty environment, gives the build tree's bits and
maps nothing outside DIR but the system's glibc, libstdc++ and libgcc_s (and the package's
own compiled model library, which AOTI extracts to a temp folder)."""

from __future__ import annotations

import filecmp
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import Build, CompiledPackage, UserPackage, run_cmd
from identity_conv.runtime.tensor_files import load_tensors
from identity_conv.verify.bits import compare_bits

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")

# What the installed runtime may take from the machine: glibc's own pieces, libstdc++ and
# libgcc_s (the same set cmake/install_runtime_deps.cmake leaves out), from a system folder.
SYSTEM_LIBRARY = re.compile(
    r"(ld-linux[-_.a-z0-9]*|libc|libm|libmvec|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s|libcuda)\.so(\.[0-9]+)*")
SYSTEM_DIRS = (Path("/lib"), Path("/lib64"), Path("/usr/lib"), Path("/usr/lib64"))
# The empty environment the installed runner runs in: no LD_LIBRARY_PATH, no TMPDIR (so
# AOTI extracts a package under /tmp), nothing from the venv.
EMPTY_ENV = {"PATH": "/usr/bin:/bin"}
CHILD_TMP = Path("/tmp")
OP_LIBRARIES = {"libidentity_conv_ops.so", "libextra_ops.so"}
VENV_TORCH_LIB = Path(torch.__file__).resolve().parent / "lib"
INSTALL_REPORT = re.compile(r"installed the C\+\+ runtime to (.+): (\d+) MiB in (\d+) files")


@dataclass(frozen=True)
class Installed:
    dir: Path
    runner: Path
    lib: Path
    output: str  # cmake --install's output


@pytest.fixture(scope="module")
def installed(build: Build, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """One install of the session's build into a fresh folder, with the venv's cmake."""
    prefix = (tmp_path_factory.mktemp("install") / "runtime").resolve()
    cmake = Path(sys.executable).parent / "cmake"
    result = run_cmd(cmake, "--install", build.dir, "--prefix", prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    return Installed(prefix, prefix / "bin" / "aoti_runner", prefix / "lib", result.stdout + result.stderr)


def dynamic_section(path: Path) -> tuple[list[str], str | None]:
    """(NEEDED names, RUNPATH or RPATH or None) of an ELF file, from readelf -d."""
    result = run_cmd("readelf", "-d", path)
    assert result.returncode == 0, result.stderr
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", result.stdout)
    runpath = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*?)\]", result.stdout)
    return needed, runpath.group(1) if runpath else None


def regular_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def loaded_objects(output: str) -> list[Path]:
    """--list-loaded-objects lines; a file deleted since it was mapped (AOTI removes its
    extracted model library) carries a " (deleted)" suffix."""
    return [Path(line.removeprefix("loaded object: ").removesuffix(" (deleted)"))
            for line in output.splitlines() if line.startswith("loaded object: ")]


def check_mapped(output: str, installed: Installed, package: Path, op_libraries: set[str]) -> None:
    """Everything the runner mapped comes from DIR, from the system's base set, or is the
    package's own model library as AOTI extracted it (<tmp>/aotinductor_*/<archive entry>)."""
    loaded = loaded_objects(output)
    entries = [name for name in zipfile.ZipFile(package).namelist() if name.endswith(".so")]
    model_library = re.compile(rf"{re.escape(str(CHILD_TMP))}/aotinductor_[^/]+/({'|'.join(map(re.escape, entries))})")
    model_libraries = [p for p in loaded if model_library.fullmatch(str(p))]
    assert model_libraries, loaded
    from_dir = {p.name for p in loaded if p.is_relative_to(installed.dir)}
    # The list is real: the libraries this run must have mapped are in it, from DIR.
    assert {"libtorch_cpu.so", "libc10.so", *op_libraries} <= from_dir, loaded
    assert any(name.startswith("libcrypto.so") for name in from_dir), loaded
    for path in loaded:
        if path in model_libraries or path.is_relative_to(installed.dir):
            continue
        assert SYSTEM_LIBRARY.fullmatch(path.name), f"{path} is mapped from outside {installed.dir}"
        assert any(path.is_relative_to(d) for d in SYSTEM_DIRS), f"{path} is not a system library"


# --- what is installed --------------------------------------------------------------

def test_install_reports_a_sane_size(installed):
    report = INSTALL_REPORT.search(installed.output)
    assert report, installed.output
    print(report.group(0))
    files = regular_files(installed.dir)
    total = sum(p.stat().st_size for p in files)
    assert Path(report.group(1)) == installed.dir
    assert int(report.group(3)) == len(files)
    assert int(report.group(2)) == (total + 2**19) // 2**20
    # Less than the folders it is copied from: torch/lib, and a CUDA torch's nvidia wheels.
    sources = [VENV_TORCH_LIB, VENV_TORCH_LIB.parent.parent / "nvidia"]
    available = sum(p.stat().st_size for folder in sources if folder.is_dir() for p in regular_files(folder))
    assert 10 * 2**20 < total < available


def test_installed_tree_is_the_runner_the_op_libraries_and_their_dependencies(installed):
    assert [p.name for p in (installed.dir / "bin").iterdir()] == ["aoti_runner"]
    assert sorted(p.name for p in installed.dir.iterdir()) == ["bin", "lib"]
    names = {p.name for p in installed.lib.iterdir()}
    assert OP_LIBRARIES <= names
    assert {"libtorch_cpu.so", "libc10.so", "libgomp.so.1"} <= names, names
    assert any(name.startswith("libcrypto.so") for name in names), names
    # Neither Python nor what only Python needs; nothing from the system's base set.
    assert not [n for n in names if re.match(r"lib(torch_python|python\d|shm)", n)], names
    assert not [n for n in names if SYSTEM_LIBRARY.fullmatch(n)], names
    # torch's libraries are the venv's own files where their RUNPATH is $ORIGIN already
    # (a CUDA torch's also name the nvidia wheels' folders; those are rewritten).
    for name in names & {p.name for p in VENV_TORCH_LIB.iterdir()}:
        if dynamic_section(VENV_TORCH_LIB / name)[1] == "$ORIGIN":
            assert filecmp.cmp(installed.lib / name, VENV_TORCH_LIB / name, shallow=False), name
        else:
            assert dynamic_section(installed.lib / name)[1] == "$ORIGIN", name


def test_installed_libraries_are_exactly_the_closure_of_what_is_needed(installed):
    """Every NEEDED name outside the system's base set is installed, and every installed
    library but the op libraries (which the runner dlopens) is NEEDED by an installed file."""
    needed_by_anyone: set[str] = set()
    for path in regular_files(installed.dir):
        assert is_elf(path), path
        needed, _ = dynamic_section(path)
        for name in needed:
            if not SYSTEM_LIBRARY.fullmatch(name):
                assert (installed.lib / name).exists(), f"{path.name} needs {name}, not installed"
                needed_by_anyone.add(name)
    unneeded = {p.name for p in installed.lib.iterdir()} - needed_by_anyone - OP_LIBRARIES
    assert not unneeded, f"installed but needed by nothing: {unneeded}"


def test_installed_runpaths_are_relative_to_the_install(installed, build):
    _, runpath = dynamic_section(installed.runner)
    assert runpath == "$ORIGIN/../lib"
    for path in regular_files(installed.lib):
        _, runpath = dynamic_section(path)
        assert runpath in ("$ORIGIN", None), f"{path.name}: RUNPATH {runpath}"
    # The build tree's runner is untouched: it still finds the venv's libtorch.
    _, build_runpath = dynamic_section(build.runner)
    assert build_runpath == str(VENV_TORCH_LIB)
    for path in regular_files(installed.dir):
        _, runpath = dynamic_section(path)
        assert sys.prefix not in (runpath or "") and str(build.dir) not in (runpath or ""), path


def test_installing_again_changes_nothing(installed, build):
    before = {p.relative_to(installed.dir): p.read_bytes() for p in regular_files(installed.dir)
              if p.stat().st_size < 2**24}
    result = run_cmd(Path(sys.executable).parent / "cmake", "--install", build.dir, "--prefix", installed.dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert INSTALL_REPORT.search(result.stdout)
    after = {p.relative_to(installed.dir): p.read_bytes() for p in regular_files(installed.dir)
             if p.stat().st_size < 2**24}
    assert after == before


# --- the installed runner, in an empty environment -------------------------------------

def test_installed_runner_runs_the_demo_package_with_the_build_trees_bits(
        installed, build, compiled_package: CompiledPackage, tmp_path):
    reference = run_cmd(build.runner, compiled_package.path, build.op_library,
                        "--inputs", compiled_package.input_file, "--outputs", tmp_path / "build.pt")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    result = run_cmd(installed.runner, compiled_package.path, installed.lib / "libidentity_conv_ops.so",
                     "--inputs", compiled_package.input_file, "--outputs", tmp_path / "installed.pt",
                     "--list-loaded-objects", env=EMPTY_ENV, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("PASSED"), result.stdout
    built, ours = load_tensors(tmp_path / "build.pt"), load_tensors(tmp_path / "installed.pt")
    assert len(built) == len(ours) == 1
    assert compare_bits(ours[0], built[0]).identical
    assert compare_bits(ours[0], compiled_package.inputs[0]).identical
    check_mapped(result.stdout, installed, compiled_package.path, {"libidentity_conv_ops.so"})


def test_installed_runner_runs_a_two_library_package_with_the_build_trees_bits(
        installed, build, two_library: UserPackage, tmp_path):
    assert two_library.exit_code == 0, two_library.output
    inputs, expected = two_library.reference / "inputs.pt", two_library.reference / "expected.pt"
    reference = run_cmd(build.runner, two_library.path, build.op_library, build.extra_op_library,
                        "--inputs", inputs, "--expected", expected, "--outputs", tmp_path / "build.pt")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    result = run_cmd(installed.runner, two_library.path, installed.lib / "libidentity_conv_ops.so",
                     installed.lib / "libextra_ops.so", "--inputs", inputs, "--expected", expected,
                     "--outputs", tmp_path / "installed.pt", "--list-loaded-objects", env=EMPTY_ENV, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: output[0] vs expected[0] (bitwise): identical" in result.stdout, result.stdout
    built, ours = load_tensors(tmp_path / "build.pt"), load_tensors(tmp_path / "installed.pt")
    assert len(built) == len(ours) >= 1
    for a, b in zip(ours, built):
        assert compare_bits(a, b).identical
    check_mapped(result.stdout, installed, two_library.path, OP_LIBRARIES)
