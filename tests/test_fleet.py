"""Rolling updates and a lost replica under load, on real tritonservers and a real
HAProxy: two versions of a small MLP (two weight seeds, each compiled once per
session), 8 HTTP clients, every response compared bit for bit with each version's
outputs from the Python runtime. A shorter run of ./scripts/fleet_demo.sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aoti_deploy.api import export
from aoti_deploy.serve import fleet, haproxy, triton_client, triton_install

from conftest import REPO_ROOT, Build, skip_or_fail_without_triton

pytestmark = [pytest.mark.triton, pytest.mark.fleet]

CLIENTS = 8
TIMING = fleet.Timing(steady_s=2.0, down_s=0.5, settle_s=1.0, timeout_s=120.0)


@pytest.fixture(scope="session")
def fleet_model(tmp_path_factory: pytest.TempPathFactory) -> fleet.FleetModel:
    """The two versions, compiled once, their signing keys and expected outputs."""
    try:
        triton_install.tritonserver_binary()
        triton_install.require_triton_client()
        haproxy.haproxy_binary()
    except (triton_install.TritonUnavailableError, haproxy.HAProxyUnavailableError) as error:
        skip_or_fail_without_triton(str(error))
    return fleet.prepare_model(tmp_path_factory.mktemp("fleet_model"), export)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory, build: Build, fleet_model: fleet.FleetModel):
    """Two replicas on one repository holding the old version, behind HAProxy."""
    work = tmp_path_factory.mktemp("replicas")
    fleet.publish(fleet_model, work / "repository", fleet.OLD)
    with fleet.ReplicaSet(work / "repository", build.dir / "backends", work).start(TIMING.timeout_s) as replica_set:
        yield replica_set
    pids = [server.pid for server in replica_set.servers] + [replica_set.balancer.pid]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "a process outlived the fleet"


def describe(result: fleet.ScenarioResult) -> str:
    return f"{result}"


def test_the_two_versions_differ_and_each_request_is_told_apart(fleet_model: fleet.FleetModel) -> None:
    for i in range(len(fleet_model.inputs)):
        old, new = fleet_model.expected[fleet.OLD][i], fleet_model.expected[fleet.NEW][i]
        assert fleet_model.version_of(i, old) == fleet.OLD
        assert fleet_model.version_of(i, new) == fleet.NEW
        flipped = [t.clone() for t in old]
        flipped[0].view(-1)[0] = -flipped[0].view(-1)[0]
        assert fleet_model.version_of(i, flipped) == fleet.OTHER_BITS


@pytest.mark.parametrize("control", ["poll", "explicit"])
def test_a_rolling_update_on_one_server_fails_no_request(control: str, fleet_model: fleet.FleetModel, build: Build,
                                                          tmp_path: Path) -> None:
    """A new signed version published under load: every response is the old or the new
    version's bits, none fails, and after the first new answer no request gets the old."""
    result = fleet.rolling_update_one_server(fleet_model, tmp_path, build.dir / "backends", control=control,
                                             clients=CLIENTS, timing=TIMING)
    print(describe(result))
    assert result.failed == 0, result.errors
    assert result.other_bits == 0 and result.stale == 0, describe(result)
    assert result.old > 0 and result.new > 0, describe(result)
    assert result.first_new_s is not None and result.first_new_s < 30


def test_a_killed_replica_fails_no_request_and_returns(fleet_model: fleet.FleetModel, replicas: fleet.ReplicaSet
                                                       ) -> None:
    """SIGKILL one of two replicas under load: HAProxy re-sends what the dead one held
    (retry-on, redispatch), takes it out on its failed checks and back once restarted."""
    result = fleet.replica_kill_and_restart(fleet_model, replicas, clients=CLIENTS, timing=TIMING)
    print(describe(result))
    assert result.failed == 0, result.errors
    assert result.other_bits == 0, describe(result)
    assert result.detect_s is not None and result.detect_s < 5
    assert result.return_s is not None and result.ready_s is not None and result.return_s >= result.ready_s - 0.05
    assert all(state.up for state in replicas.balancer.servers().values())


def test_a_rolling_update_across_two_replicas_fails_no_request(fleet_model: fleet.FleetModel,
                                                               replicas: fleet.ReplicaSet) -> None:
    result = fleet.rolling_update_replicas(fleet_model, replicas, clients=CLIENTS, timing=TIMING)
    print(describe(result))
    assert result.failed == 0, result.errors
    assert result.other_bits == 0 and result.stale == 0, describe(result)
    assert result.new > 0, describe(result)
    for server in replicas.servers:
        assert {s.version for s in triton_client.model_states(server.http_url)
                if s.name == fleet_model.name and s.state == "READY"} == {str(fleet.NEW)}


def test_the_balancer_config_is_one_haproxy_accepts(tmp_path: Path) -> None:
    try:
        binary = haproxy.haproxy_binary()
    except haproxy.HAProxyUnavailableError as error:
        skip_or_fail_without_triton(str(error))
    text = haproxy.haproxy_config(18080, [18001, 18002], tmp_path / "admin.sock")
    assert "retry-on conn-failure empty-response junk-response 503" in text
    assert "option httpchk GET /v2/health/ready" in text and "bind 127.0.0.1:18080" in text
    # The excerpt docs/rolling-updates.md shows is the generated config's.
    page = (REPO_ROOT / "docs" / "rolling-updates.md").read_text()
    excerpt = page.split("haproxy -c accepts the generated config) -->\n```\n", 1)[1].split("```", 1)[0]
    generated = {line.strip() for line in text.splitlines()}
    assert [line for line in excerpt.splitlines() if line.strip() not in generated] == []
    (tmp_path / "haproxy.cfg").write_text(text)
    checked = subprocess.run([str(binary), "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_summary_has_a_row_per_scenario_with_its_failed_requests() -> None:
    from rich.console import Console

    from aoti_deploy.cli.fleet import summary_line, summary_table

    results = [fleet.ScenarioResult("rolling update, one server (poll)", 100, 0, 60, 40, 0, 0, 2.0, 3.0, 1.2, 1.3),
               fleet.ScenarioResult("replica SIGKILL and restart", 100, 2, 100, 0, 0, 0, 2.0, 9.0, detect_s=0.3,
                                    ready_s=0.5, return_s=0.7, retries=4)]
    console = Console(width=190, record=True)
    console.print(summary_table(results))
    lines = console.export_text().splitlines()
    assert any("rolling update, one server" in line and "failed requests 0" in line for line in lines), lines
    assert any("replica SIGKILL" in line and "failed requests 2" in line and "detect 0.30 s" in line
               for line in lines), lines
    assert summary_line(results[1]).startswith("replica SIGKILL and restart: failed requests 2, 100 requests")


def test_the_cli_refuses_a_bad_control_before_compiling(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from aoti_deploy.cli.main import app

    result = CliRunner().invoke(app, ["fleet", "--work", str(tmp_path), "--control", "sometimes"])
    assert result.exit_code == 2, result.output
    assert "control must be poll or explicit, got 'sometimes'" in result.output
    assert not (tmp_path / "packages").exists()
