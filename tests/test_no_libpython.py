"""The op library and the C++ runner link no libpython, and a running runner maps
none: proven from ELF dependencies and from the process's own loaded objects."""

from __future__ import annotations

import re
import shutil

import pytest

from conftest import run_cmd

LIBPYTHON = re.compile(r"libpython\d")


def needed_entries(path) -> list[str]:
    result = run_cmd("readelf", "-d", path)
    assert result.returncode == 0, result.stderr
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", result.stdout)


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf (binutils)")
@pytest.mark.parametrize("artifact", ["op_library", "runner"])
def test_no_libpython_in_direct_dependencies(build, artifact):
    needed = needed_entries(getattr(build, artifact))
    assert any(name.startswith(("libtorch", "libc10")) for name in needed), needed
    assert not [name for name in needed if LIBPYTHON.search(name)]


@pytest.mark.parametrize("artifact", ["op_library", "runner"])
def test_no_libpython_in_transitive_dependencies(build, artifact):
    result = run_cmd("ldd", getattr(build, artifact))
    assert result.returncode == 0, result.stderr
    assert "libtorch_cpu.so" in result.stdout
    assert "not found" not in result.stdout
    assert not LIBPYTHON.search(result.stdout), result.stdout


def test_running_runner_maps_no_libpython(build, compiled_package):
    result = run_cmd(build.runner, compiled_package.path, build.op_library, "--list-loaded-objects")
    assert result.returncode == 0, result.stderr
    loaded = [line.removeprefix("loaded object: ") for line in result.stdout.splitlines()
              if line.startswith("loaded object: ")]
    # The list is real: it holds the libraries this run must have mapped, including
    # the package's own compiled kernels, extracted from the .pt2.
    names = [path.rsplit("/", 1)[-1] for path in loaded]
    assert "libidentity_conv_ops.so" in names
    assert "libtorch_cpu.so" in names
    assert any(".wrapper.so" in path for path in loaded), loaded
    assert not [path for path in loaded if LIBPYTHON.search(path)], loaded
