"""`cmake --install build --prefix DIR` gives a self-contained C++ runtime: DIR/bin/aoti_runner
and DIR/lib with the op libraries and exactly the shared libraries they need. Proven the
hard way: the installed runner, with the venv and the build tree hidden (tmpfs mounted
over them in a user+mount namespace) and an empty environment, gives the build tree's
bits and maps nothing outside DIR but the system's glibc, libstdc++ and libgcc_s (and the
package's own compiled model library, which AOTI extracts to a temp folder). Where the
kernel refuses unprivileged namespaces, the runs fall back to the empty environment
alone, and say so with a warning."""

from __future__ import annotations

import filecmp
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, Build, CompiledPackage, UserPackage, run_cmd
from aoti_deploy.runtime.tensor_files import load_tensors
from aoti_deploy.verify.bits import compare_bits

pytestmark = pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")

INSTALL_HELPER = REPO_ROOT / "cmake" / "install_runtime_deps.cmake"


def system_sonames() -> list[str]:
    """The soname regexes of _AOTI_DEPLOY_SYSTEM_SONAMES in cmake/install_runtime_deps.cmake:
    what the install leaves to the machine (glibc's own pieces, libstdc++, libgcc_s, the CUDA
    driver), read from its one definition. Each is a quoted CMake argument, whose escapes
    (a doubled backslash for one) are undone; CMake's regex syntax there is Python's too."""
    text = INSTALL_HELPER.read_text()
    block = re.search(r'set\(_AOTI_DEPLOY_SYSTEM_SONAMES((?:\s+"(?:[^"\\]|\\.)*")+)\s*\)', text)
    assert block, f"no set(_AOTI_DEPLOY_SYSTEM_SONAMES \"...\" ...) of quoted regexes in {INSTALL_HELPER}"
    return [re.sub(r"\\(.)", r"\1", quoted) for quoted in re.findall(r'"((?:[^"\\]|\\.)*)"', block.group(1))]


# What the installed runtime may take from the machine, from a system folder.
SYSTEM_LIBRARY = re.compile("|".join(f"(?:{soname})" for soname in system_sonames()))
SYSTEM_DIRS = (Path("/lib"), Path("/lib64"), Path("/usr/lib"), Path("/usr/lib64"))
# The empty environment the installed runner runs in: no LD_LIBRARY_PATH, no TMPDIR (so
# the runner unpacks a package under /tmp), nothing from the venv.
EMPTY_ENV = {"PATH": "/usr/bin:/bin"}
# What the installed runner must do without: the venv (torch and its libraries, the CUDA
# wheels) and the build tree.
VENV = Path(sys.prefix).resolve()
CHILD_TMP = Path("/tmp")
OP_LIBRARIES = {"libidentity_conv_ops.so", "libextra_ops.so"}
VENV_TORCH_LIB = Path(torch.__file__).resolve().parent / "lib"
INSTALL_REPORT = re.compile(r"installed the C\+\+ runtime to (.+): (\d+) MiB in (\d+) files")
GLIBC_REPORT = re.compile(r"; needs glibc >= ([0-9.]+)(?: and GLIBCXX >= ([0-9.]+))? on the target machine")


@dataclass(frozen=True)
class Installed:
    dir: Path
    runner: Path
    lib: Path
    output: str  # cmake --install's output


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True)
class Isolation:
    """How the installed runner runs: ``hidden`` are the folders mounted over with an empty
    tmpfs first (none where the kernel refuses, ``reason`` says why)."""
    hidden: tuple[Path, ...]
    reason: str = ""

    def command(self, *argv: object, hide: tuple[Path, ...] | None = None) -> list[str]:
        """argv in an empty environment, behind ``hide`` (default: all of ``hidden``)."""
        hide = self.hidden if hide is None else hide
        if not hide:
            return [str(a) for a in argv]
        # Every mount must work (&&), or the command does not run at all.
        mounts = " && ".join(f"mount -t tmpfs none {shlex.quote(str(d))}" for d in hide)
        script = f'{mounts} && exec env -i PATH={EMPTY_ENV["PATH"]} "$@"'
        return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *map(str, argv)]

    def note(self, record_property) -> None:
        """Say how the run was isolated: a recorded property, and a warning when the venv
        was not hidden, so a weaker run is never mistaken for the real one."""
        record_property("hidden_folders", " ".join(map(str, self.hidden)) or f"none: {self.reason}")
        if self.hidden:
            print(f"ran with {' and '.join(map(str, self.hidden))} hidden (tmpfs in a user+mount namespace)")
        else:
            warnings.warn(pytest.PytestWarning(
                f"the venv and the build tree are NOT hidden from the installed runner ({self.reason}); "
                "it ran in an empty environment only, checked by the objects it mapped"))


def run_isolated(isolation: Isolation, *argv: object, cwd: Path,
                 hide: tuple[Path, ...] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cmd(*isolation.command(*argv, hide=hide), env=EMPTY_ENV, cwd=cwd)


@pytest.fixture(scope="module")
def isolation(build: Build) -> Isolation:
    """Probes once whether this kernel lets an unprivileged user mount a tmpfs over the venv
    and the build tree in a user+mount namespace, and whether they then look empty."""
    hidden = (VENV, build.dir.resolve())
    if shutil.which("unshare") is None:
        return Isolation((), "no unshare (util-linux)")
    probe = Isolation(hidden)
    check = " && ".join(f'[ -z "$(ls -A {shlex.quote(str(d))})" ]' for d in hidden)
    result = run_cmd(*probe.command("sh", "-c", f"{check} && echo hidden"), env=EMPTY_ENV)
    if result.returncode != 0 or result.stdout.strip() != "hidden":
        reason = (result.stderr.strip() or result.stdout.strip() or f"exit code {result.returncode}")
        return Isolation((), f"unprivileged user+mount namespaces unavailable: {reason.splitlines()[-1]}")
    return probe


def outside(path: Path, isolation: Isolation) -> Path:
    """A file the isolated runner reads or writes must not be in a hidden folder."""
    path = path.resolve()
    assert not any(path.is_relative_to(d) for d in isolation.hidden), f"{path} would be hidden"
    return path


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


def soname(path: Path) -> str | None:
    result = run_cmd("readelf", "-d", path)
    assert result.returncode == 0, result.stderr
    found = re.search(r"\(SONAME\)\s+Library soname: \[(.+?)\]", result.stdout)
    return found.group(1) if found else None


def regular_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def loaded_objects(output: str) -> list[Path]:
    """--list-loaded-objects lines; a file deleted since it was mapped (the runner removes
    its unpacked model library once the loader is built) carries a " (deleted)" suffix."""
    return [Path(line.removeprefix("loaded object: ").removesuffix(" (deleted)"))
            for line in output.splitlines() if line.startswith("loaded object: ")]


def check_mapped(output: str, installed: Installed, package: Path, op_libraries: set[str]) -> None:
    """Everything the runner mapped comes from DIR, from the system's base set, or is the
    package's own model library as the runner unpacked it (<tmp>/aoti_deploy_unpacked_*/<archive entry>)."""
    loaded = loaded_objects(output)
    entries = [name for name in zipfile.ZipFile(package).namelist() if name.endswith(".so")]
    model_library = re.compile(rf"{re.escape(str(CHILD_TMP))}/aoti_deploy_unpacked_[^/]+/({'|'.join(map(re.escape, entries))})")
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


def glibc_versions_needed(path: Path) -> tuple[set[str], set[str]]:
    """The GLIBC_ and GLIBCXX_ versions an ELF file needs (its version-needs entries, as
    readelf --version-info lists them: "Name: GLIBC_2.34  Flags: none  Version: 5")."""
    result = run_cmd("readelf", "--version-info", "-W", path)
    assert result.returncode == 0, result.stderr
    needs = re.findall(r"Name: (GLIBC|GLIBCXX)_([0-9.]+)\s+Flags", result.stdout)
    return {v for lib, v in needs if lib == "GLIBC"}, {v for lib, v in needs if lib == "GLIBCXX"}


def test_install_report_names_the_newest_glibc_the_installed_files_need(installed):
    report = GLIBC_REPORT.search(installed.output)
    assert report, installed.output
    print(report.group(0).removeprefix("; "))
    glibc: set[str] = set()
    glibcxx: set[str] = set()
    for path in regular_files(installed.dir):
        needs = glibc_versions_needed(path)
        glibc |= needs[0]
        glibcxx |= needs[1]
    assert report.group(1) == max(glibc, key=version)
    assert report.group(2) == max(glibcxx, key=version)
    # This machine runs them, so it has at least that glibc.
    running = os.confstr("CS_GNU_LIBC_VERSION")
    assert running and running.startswith("glibc ")
    assert version(report.group(1)) <= version(running.split()[1])


def test_the_system_set_is_read_from_the_cmake_helper():
    assert len(system_sonames()) >= 4
    for name in ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"):
        assert SYSTEM_LIBRARY.fullmatch(name), name
    for name in ("libtorch_cpu.so", "libgomp.so.1", "libcrypto.so.3", "libcudart.so.13", "libc10.so"):
        assert not SYSTEM_LIBRARY.fullmatch(name), name


def test_installed_tree_is_the_runner_the_op_libraries_and_their_dependencies(installed):
    assert [p.name for p in (installed.dir / "bin").iterdir()] == ["aoti_runner"]
    assert sorted(p.name for p in installed.dir.iterdir()) == ["backends", "bin", "lib"]
    # A Triton backend directory: tritonserver --backend-directory DIR/backends.
    assert [p.name for p in (installed.dir / "backends" / "aoti").iterdir()] == ["libtriton_aoti.so"]
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
    library but the op libraries (which the runner dlopens) is NEEDED by an installed file,
    or is the file a NEEDED soname links to (libz.so.1 -> libz.so.1.2.13)."""
    needed_by_anyone: set[str] = set()
    for path in regular_files(installed.dir):
        assert is_elf(path), path
        needed, _ = dynamic_section(path)
        for name in needed:
            if not SYSTEM_LIBRARY.fullmatch(name):
                assert (installed.lib / name).exists(), f"{path.name} needs {name}, not installed"
                needed_by_anyone.add(name)
                link = installed.lib / name
                while link.is_symlink():  # the chain, inside the install
                    link = installed.lib / os.readlink(link)
                    assert link.parent == installed.lib and link.exists(), f"{name} links outside the install"
                    needed_by_anyone.add(link.name)
    unneeded = {p.name for p in installed.lib.iterdir()} - needed_by_anyone - OP_LIBRARIES
    assert not unneeded, f"installed but needed by nothing: {unneeded}"


def test_installed_runpaths_are_relative_to_the_install(installed, build):
    _, runpath = dynamic_section(installed.runner)
    assert runpath == "$ORIGIN/../lib"
    _, runpath = dynamic_section(installed.dir / "backends" / "aoti" / "libtriton_aoti.so")
    assert runpath == "$ORIGIN/../../lib"
    for path in regular_files(installed.lib):
        _, runpath = dynamic_section(path)
        assert runpath in ("$ORIGIN", None), f"{path.name}: RUNPATH {runpath}"
    # The build tree's runner is untouched: it still finds the venv's libtorch.
    _, build_runpath = dynamic_section(build.runner)
    assert build_runpath == str(VENV_TORCH_LIB)
    for path in regular_files(installed.dir):
        _, runpath = dynamic_section(path)
        assert sys.prefix not in (runpath or "") and str(build.dir) not in (runpath or ""), path


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for stand-in libraries")
def test_install_fails_clearly_when_no_installed_openmp_library_is_libgomp_so_1(tmp_path):
    """The install-time check, on stand-in libraries: an OpenMP dependency that answers to
    libgomp.so.1 neither by name nor by soname fails the install, saying what was expected,
    what was found and how to fix it."""
    empty = tmp_path / "empty.c"
    empty.write_text("int placeholder;\n")
    libdir = tmp_path / "lib"
    libdir.mkdir()

    def library(name: str, soname: str) -> Path:
        result = run_cmd("cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", libdir / name, empty)
        assert result.returncode == 0, result.stderr
        return libdir / name

    def check(*dependencies: Path) -> subprocess.CompletedProcess[str]:
        script = tmp_path / "check.cmake"
        paths = " ".join(f'"{d}"' for d in dependencies)
        script.write_text(f'include("{INSTALL_HELPER}")\n_aoti_deploy_check_openmp("/built/aoti_runner" "{libdir}" {paths})\n')
        return run_cmd(Path(sys.executable).parent / "cmake", "-P", script)

    hashed = library("libgomp-a34b3233.so.1", "libgomp-a34b3233.so.1")
    other = library("libc10.so", "libc10.so")
    failed = check(other, hashed)
    assert failed.returncode != 0
    message = " ".join(failed.stderr.split())
    assert "/built/aoti_runner uses OpenMP" in message, failed.stderr
    assert "Expected: a library in" in message and "libgomp.so.1" in message, failed.stderr
    assert f"Found: {hashed} (soname libgomp-a34b3233.so.1)." in message, failed.stderr
    assert "Fix: " in message, failed.stderr
    # Any other name is fine once the soname is libgomp.so.1, and so is that name; no
    # OpenMP at all needs nothing.
    assert check(other, library("libgomp-renamed.so.1", "libgomp.so.1")).returncode == 0
    assert check(other, library("libgomp.so.1", "libgomp.so.1")).returncode == 0
    assert check(other).returncode == 0


def test_installing_again_changes_nothing(installed, build):
    before = {p.relative_to(installed.dir): p.read_bytes() for p in regular_files(installed.dir)
              if p.stat().st_size < 2**24}
    result = run_cmd(Path(sys.executable).parent / "cmake", "--install", build.dir, "--prefix", installed.dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert INSTALL_REPORT.search(result.stdout)
    after = {p.relative_to(installed.dir): p.read_bytes() for p in regular_files(installed.dir)
             if p.stat().st_size < 2**24}
    assert after == before


# --- the packages' model libraries ------------------------------------------------------

@pytest.mark.parametrize("package_fixture", ["compiled_package", "two_library"])
def test_a_packages_model_library_needs_only_installed_or_system_libraries(
        installed, request, package_fixture, tmp_path):
    """The model library AOTI compiled into the package (the one *.so in the .pt2 zip) is
    loaded from a temp folder with no RUNPATH: each name it NEEDs must be an installed file
    that answers to that name (the runner has it loaded by then), or the system's."""
    package = request.getfixturevalue(package_fixture)
    if isinstance(package, UserPackage):
        assert package.exit_code == 0, package.output
    with zipfile.ZipFile(package.path) as archive:
        entries = [name for name in archive.namelist() if name.endswith(".so")]
        assert len(entries) == 1, entries
        model_library = tmp_path / "model.so"
        model_library.write_bytes(archive.read(entries[0]))
    needed, _ = dynamic_section(model_library)
    assert "libtorch_cpu.so" in needed, needed
    installed_names = {p.name for p in installed.lib.iterdir()}
    sonames = {soname(p) for p in installed.lib.iterdir() if p.is_file()}
    for name in needed:
        if SYSTEM_LIBRARY.fullmatch(name):
            continue
        assert name in installed_names, f"{entries[0]} needs {name}, not installed"
        assert name in sonames, f"{entries[0]} needs {name}; no installed library has that soname"


# --- the installed runner, behind a hidden venv and build tree, in an empty environment -----

def test_hiding_the_venv_stops_the_build_trees_runner(isolation, build, tmp_path):
    """The control: the build tree's runner finds libtorch through the venv only, so with the
    venv hidden it cannot start. A hidden run that passes proves something."""
    if not isolation.hidden:
        pytest.skip(f"the venv cannot be hidden here: {isolation.reason}")
    result = run_isolated(isolation, build.runner, "--help", cwd=tmp_path, hide=(VENV,))
    assert result.returncode != 0, result.stdout
    assert "error while loading shared libraries" in result.stderr, result.stderr
    assert ".so" in result.stderr, result.stderr


def test_installed_runner_runs_the_demo_package_with_the_build_trees_bits(
        installed, isolation, build, compiled_package: CompiledPackage, tmp_path, record_property):
    reference = run_cmd(build.runner, compiled_package.path, build.op_library,
                        "--inputs", compiled_package.input_file, "--outputs", tmp_path / "build.pt")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    isolation.note(record_property)
    result = run_isolated(isolation, outside(installed.runner, isolation), outside(compiled_package.path, isolation),
                          installed.lib / "libidentity_conv_ops.so",
                          "--inputs", outside(compiled_package.input_file, isolation),
                          "--outputs", outside(tmp_path / "installed.pt", isolation),
                          "--list-loaded-objects", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("PASSED"), result.stdout
    built, ours = load_tensors(tmp_path / "build.pt"), load_tensors(tmp_path / "installed.pt")
    assert len(built) == len(ours) == 1
    assert compare_bits(ours[0], built[0]).identical
    assert compare_bits(ours[0], compiled_package.inputs[0]).identical
    check_mapped(result.stdout, installed, compiled_package.path, {"libidentity_conv_ops.so"})


def test_installed_runner_runs_a_two_library_package_with_the_build_trees_bits(
        installed, isolation, build, two_library: UserPackage, tmp_path, record_property):
    assert two_library.exit_code == 0, two_library.output
    inputs, expected = two_library.reference / "inputs.pt", two_library.reference / "expected.pt"
    reference = run_cmd(build.runner, two_library.path, build.op_library, build.extra_op_library,
                        "--inputs", inputs, "--expected", expected, "--outputs", tmp_path / "build.pt")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    isolation.note(record_property)
    result = run_isolated(isolation, outside(installed.runner, isolation), outside(two_library.path, isolation),
                          installed.lib / "libidentity_conv_ops.so", installed.lib / "libextra_ops.so",
                          "--inputs", outside(inputs, isolation), "--expected", outside(expected, isolation),
                          "--outputs", outside(tmp_path / "installed.pt", isolation),
                          "--list-loaded-objects", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: output[0] vs expected[0] (bitwise): identical" in result.stdout, result.stdout
    built, ours = load_tensors(tmp_path / "build.pt"), load_tensors(tmp_path / "installed.pt")
    assert len(built) == len(ours) >= 1
    for a, b in zip(ours, built):
        assert compare_bits(a, b).identical
    check_mapped(result.stdout, installed, two_library.path, OP_LIBRARIES)
