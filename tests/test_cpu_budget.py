"""The default thread count follows the CPU limit of the process's cgroup, not the
host's cores (cpp_runtime/core/cpu_budget.cpp), tested on the real thing: aoti_runner
started inside a new cgroup with a CPU quota (cgroup v1 cpu.cfs_quota_us, or v2
cpu.max), as a container's limit puts it, against the same runner outside it. The
Kubernetes manifests (serve/kubernetes.py) size the pod by this rule. Needs a
writable cgroup hierarchy (root, as CI runs); skipped where there is none."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from conftest import Build, CompiledPackage, run_cmd

V1_CPU = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup")


def _make_cgroup(quota_cpus: float) -> tuple[Path, str]:
    """A new cgroup limited to ``quota_cpus``; returns it and its version."""
    name = f"aoti_deploy_test_{uuid.uuid4().hex[:8]}"
    if (V1_CPU / "cpu.cfs_quota_us").is_file():
        group = V1_CPU / name
        group.mkdir()
        period = int((group / "cpu.cfs_period_us").read_text())
        (group / "cpu.cfs_quota_us").write_text(str(int(quota_cpus * period)))
        return group, "v1"
    if (V2_ROOT / "cgroup.controllers").is_file() and "cpu" in (V2_ROOT / "cgroup.subtree_control").read_text():
        group = V2_ROOT / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{int(quota_cpus * 100000)} 100000")
        return group, "v2"
    raise OSError("no cgroup cpu controller to write to")


@pytest.fixture
def one_cpu_cgroup():
    if os.cpu_count() is None or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs at least 2 CPUs, so a 1-CPU limit differs from the host")
    try:
        group, version = _make_cgroup(1.0)
    except OSError as error:
        pytest.skip(f"no writable cgroup hierarchy here ({error}); CI runs as root with one")
    try:
        yield group, version
    finally:
        group.rmdir()  # empty again: the runner has exited


def _bench(build: Build, package: CompiledPackage, op_library: Path, out: Path, cgroup: Path | None) -> dict:
    def enter() -> None:  # in the child, before exec: join the cgroup
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    result = run_cmd(build.runner, package.path, op_library, "--bench", "5", "--warmup", "4", "--bench-json", out,
                     preexec_fn=enter if cgroup is not None else None)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text())


def test_a_cgroup_cpu_limit_sets_the_default_intra_op_threads(build: Build, compiled_package: CompiledPackage,
                                                              op_library: Path, tmp_path: Path, one_cpu_cgroup):
    group, version = one_cpu_cgroup
    host = len(os.sched_getaffinity(0))
    outside = _bench(build, compiled_package, op_library, tmp_path / "outside.json", None)
    inside = _bench(build, compiled_package, op_library, tmp_path / "inside.json", group)
    # Outside: the host's cores, so 1 is timed against cores / serving threads.
    assert f"= {host} / 1" not in outside["intra_op_choice"], outside["intra_op_choice"]
    assert set(outside["intra_op_trial_p50_us"]) == {"1", str(host)}, outside
    # Inside a 1-CPU limit: 1 CPU usable, nothing to choose from.
    assert inside["intra_op_threads"] == 1, inside
    assert inside["intra_op_choice"] == "cores / serving threads = 1 / 1, so 1: nothing to choose from", (version,
                                                                                                          inside)
