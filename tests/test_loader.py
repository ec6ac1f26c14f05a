"""The op loader: search order, idempotence, and errors that name every path tried."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from identity_conv import ops
from identity_conv.errors import OpLibraryError
from identity_conv.ops import LIBRARY_ENV_VAR, library_candidates, load_op_library


def test_explicit_path_is_the_only_candidate(tmp_path):
    assert library_candidates(tmp_path / "x.so") == [tmp_path / "x.so"]


def test_env_var_comes_before_the_build_folders(monkeypatch, tmp_path):
    monkeypatch.setenv(LIBRARY_ENV_VAR, str(tmp_path / "env.so"))
    monkeypatch.chdir(tmp_path)
    candidates = library_candidates()
    assert candidates[0] == tmp_path / "env.so"
    assert candidates[1] == tmp_path / "build" / "libidentity_conv_ops.so"
    assert candidates[-1] == Path(ops.__file__).resolve().parents[2] / "build" / "libidentity_conv_ops.so"


def test_loading_twice_returns_the_same_library(op_library):
    assert load_op_library(op_library) == op_library.resolve()
    assert load_op_library() == op_library.resolve()
    # The fakes are registered once: tracing with fake tensors still works.
    with torch._subclasses.FakeTensorMode():
        out = torch.ops.my_ops.identity_conv_op(torch.empty(2, 3))
    assert out.shape == (2, 3)


def _load_in_fresh_process(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, **env}, cwd="/", timeout=120)


def test_missing_library_error_names_every_path_tried(monkeypatch, tmp_path):
    monkeypatch.setenv(LIBRARY_ENV_VAR, str(tmp_path / "env" / "libidentity_conv_ops.so"))
    monkeypatch.setattr(ops, "_REPO_ROOT", tmp_path / "checkout")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OpLibraryError) as error:
        load_op_library()
    message = str(error.value)
    assert "could not find the op library libidentity_conv_ops.so" in message
    for tried in ("env", "build", "checkout/build"):
        assert str(tmp_path / tried) in message
    assert LIBRARY_ENV_VAR in message and "--op-lib" in message


def test_missing_explicit_path_is_named(tmp_path):
    with pytest.raises(OpLibraryError, match=str(tmp_path / "gone.so")):
        load_op_library(tmp_path / "gone.so")


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
