"""The op loader: search order, idempotence, and errors that name every path tried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT
from identity_conv.errors import OpLibraryError
from identity_conv.ops import LIBRARY_ENV_VAR, library_candidates, load_op_library


def _load_in_fresh_process(code: str, cwd: str = "/", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=cwd, timeout=120)


def test_explicit_path_is_the_only_candidate(tmp_path):
    assert library_candidates(tmp_path / "x.so") == [tmp_path / "x.so"]


def test_env_var_comes_before_the_build_folders(monkeypatch, tmp_path):
    monkeypatch.setenv(LIBRARY_ENV_VAR, str(tmp_path / "env.so"))
    monkeypatch.chdir(tmp_path)
    candidates = library_candidates()
    assert candidates[0] == tmp_path / "env.so"
    assert candidates[1] == tmp_path / "build" / "libidentity_conv_ops.so"
    assert candidates[-1] == REPO_ROOT / "build" / "libidentity_conv_ops.so"


def test_loading_twice_returns_the_same_library(op_library):
    assert load_op_library(op_library) == op_library.resolve()
    assert load_op_library() == op_library.resolve()
    # The fakes are registered once: tracing with fake tensors still works.
    with torch._subclasses.FakeTensorMode():
        out = torch.ops.my_ops.identity_conv_op(torch.empty(2, 3))
    assert out.shape == (2, 3)


def test_missing_library_error_names_every_path_tried(tmp_path):
    # A fresh process: in this one the library is loaded already and would be reused.
    result = _load_in_fresh_process(
        "from pathlib import Path\n"
        "from identity_conv.ops import loader as ops\n"
        "from identity_conv.errors import OpLibraryError\n"
        f"ops._REPO_ROOT = Path({str(tmp_path / 'checkout')!r})\n"
        "try:\n"
        "    ops.load_op_library()\n"
        "except OpLibraryError as e:\n"
        "    print(e)\n",
        cwd=str(tmp_path),
        **{LIBRARY_ENV_VAR: str(tmp_path / "env" / "libidentity_conv_ops.so")},
    )
    message = result.stdout
    assert "could not find the op library libidentity_conv_ops.so" in message, result.stderr
    for tried in ("env", "build", "checkout/build"):
        assert str(tmp_path / tried / "libidentity_conv_ops.so") in message
    assert LIBRARY_ENV_VAR in message and "--op-lib" in message


def test_missing_explicit_path_is_named(tmp_path):
    with pytest.raises(OpLibraryError, match=str(tmp_path / "gone.so")):
        load_op_library(tmp_path / "gone.so")


def test_default_load_after_an_explicit_path_needs_no_build_folder(build, tmp_path):
    # The model calls load_op_library() with no path; after an --op-lib elsewhere it
    # must reuse that library even where no build/ folder exists.
    copy = tmp_path / "elsewhere" / "libidentity_conv_ops.so"
    copy.parent.mkdir()
    copy.write_bytes(build.op_library.read_bytes())
    result = _load_in_fresh_process(
        "from identity_conv.ops import loader as ops\n"
        "from pathlib import Path\n"
        f"ops._REPO_ROOT = Path({str(tmp_path)!r})\n"
        f"first = ops.load_op_library({str(copy)!r})\n"
        "from identity_conv.models.identity import IdentityModel\n"
        "IdentityModel(3)\n"
        "print('same' if ops.load_op_library() == first else 'different')\n",
    )
    assert result.stdout.strip() == "same", result.stderr


def test_a_second_copy_of_the_library_is_refused_not_aborted(build, tmp_path):
    copy = tmp_path / "libidentity_conv_ops_copy.so"
    copy.write_bytes(build.op_library.read_bytes())
    result = _load_in_fresh_process(
        "import torch\n"
        f"torch.ops.load_library({str(build.op_library)!r})\n"
        "from identity_conv.ops import load_op_library\n"
        "from identity_conv.errors import OpLibraryError\n"
        "try:\n"
        f"    load_op_library({str(copy)!r})\n"
        "except OpLibraryError as e:\n"
        "    print(e)\n",
    )
    assert result.returncode == 0, result.stderr
    assert "already registered in this process by another library" in result.stdout


def test_a_library_without_the_ops_is_refused(build):
    other_so = Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so"
    result = _load_in_fresh_process(
        "from identity_conv.ops import load_op_library\n"
        "from identity_conv.errors import OpLibraryError\n"
        "try:\n"
        f"    load_op_library({str(other_so)!r})\n"
        "except OpLibraryError as e:\n"
        "    print(e)\n",
    )
    assert "does not register my_ops::identity_conv_op" in result.stdout, result.stderr
