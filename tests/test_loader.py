"""The op loader: search order, idempotence, and errors that name every path tried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT
from aoti_deploy.errors import AotiDeployError, OpLibraryError
from aoti_deploy.locate import BUILD_DIR_ENV_VAR, build_dir, op_library_path, runner_path
from aoti_deploy.ops import LIBRARY_ENV_VAR, load_op_library


def _load_in_fresh_process(code: str, cwd: str = "/", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=cwd, timeout=120)


def test_the_build_folder_is_the_checkouts_from_any_folder(build, monkeypatch, tmp_path):
    """Not the current folder's build/: a relative $AOTI_DEPLOY_BUILD_DIR is read
    against the checkout's root, and without it the checkout's build/ is used."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(LIBRARY_ENV_VAR, raising=False)
    monkeypatch.setenv(BUILD_DIR_ENV_VAR, os.path.relpath(build.dir, REPO_ROOT))
    assert op_library_path() == REPO_ROOT / os.path.relpath(build.dir, REPO_ROOT) / "libidentity_conv_ops.so"
    assert runner_path().resolve() == build.runner.resolve()
    monkeypatch.delenv(BUILD_DIR_ENV_VAR)
    (tmp_path / "build").mkdir()
    assert build_dir()[0] == REPO_ROOT / "build"


def test_a_set_library_variable_is_honoured_or_an_error(build, monkeypatch, tmp_path):
    monkeypatch.setenv(LIBRARY_ENV_VAR, str(build.op_library))
    assert op_library_path() == build.op_library
    assert op_library_path(tmp_path / "given.so") == tmp_path / "given.so"  # an explicit path comes first
    monkeypatch.setenv(LIBRARY_ENV_VAR, str(tmp_path / "nonexistent.so"))
    with pytest.raises(OpLibraryError, match=f"{LIBRARY_ENV_VAR} is set to {tmp_path / 'nonexistent.so'}, which does not exist"):
        op_library_path()


def test_a_missing_runner_names_the_folder_it_looked_in(monkeypatch, tmp_path):
    monkeypatch.setenv(BUILD_DIR_ENV_VAR, str(tmp_path / "nobuild"))
    with pytest.raises(AotiDeployError, match=f"C\\+\\+ runner not found: {tmp_path / 'nobuild' / 'aoti_runner'}"):
        runner_path()
    with pytest.raises(AotiDeployError, match="given with --runner"):
        runner_path(tmp_path / "absent_runner")


def test_loading_twice_returns_the_same_library(op_library):
    assert load_op_library(op_library) == op_library.resolve()
    assert load_op_library() == op_library.resolve()
    # The fakes are registered once: tracing with fake tensors still works.
    with torch._subclasses.FakeTensorMode():
        out = torch.ops.my_ops.identity_conv_op(torch.empty(2, 3))
    assert out.shape == (2, 3)


def test_missing_library_error_names_the_folder_it_looked_in(tmp_path):
    # A fresh process: in this one the library is loaded already and would be reused.
    env = {k: v for k, v in os.environ.items() if k != LIBRARY_ENV_VAR}
    result = subprocess.run(
        [sys.executable, "-c",
         "from aoti_deploy.ops import loader as ops\n"
         "from aoti_deploy.errors import OpLibraryError\n"
         "try:\n"
         "    ops.load_op_library()\n"
         "except OpLibraryError as e:\n"
         "    print(e)\n"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**env, BUILD_DIR_ENV_VAR: str(tmp_path / "nobuild")},
    )
    message = result.stdout
    assert (f"could not find the op library libidentity_conv_ops.so in {tmp_path / 'nobuild'} "
            f"(${BUILD_DIR_ENV_VAR})") in message, result.stderr
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
        "from aoti_deploy.ops import loader as ops\n"
        f"first = ops.load_op_library({str(copy)!r})\n"
        "from aoti_deploy.models.identity import IdentityModel\n"
        "IdentityModel(3)\n"
        "print('same' if ops.load_op_library() == first else 'different')\n",
        **{BUILD_DIR_ENV_VAR: str(tmp_path)},
    )
    assert result.stdout.strip() == "same", result.stderr


def test_a_second_copy_of_the_library_is_refused_not_aborted(build, tmp_path):
    copy = tmp_path / "libidentity_conv_ops_copy.so"
    copy.write_bytes(build.op_library.read_bytes())
    result = _load_in_fresh_process(
        "import torch\n"
        f"torch.ops.load_library({str(build.op_library)!r})\n"
        "from aoti_deploy.ops import load_op_library\n"
        "from aoti_deploy.errors import OpLibraryError\n"
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
        "from aoti_deploy.ops import load_op_library\n"
        "from aoti_deploy.errors import OpLibraryError\n"
        "try:\n"
        f"    load_op_library({str(other_so)!r})\n"
        "except OpLibraryError as e:\n"
        "    print(e)\n",
    )
    assert "does not register my_ops::identity_conv_op" in result.stdout, result.stderr
