"""The Kubernetes manifests of triton-repository --kubernetes (serve/kubernetes.py),
checked offline: every object against the Kubernetes API schemas that
kubernetes-validate bundles, in strict mode, and the KServe InferenceService against
a vendored subset of KServe's schema (tests/kserve/); a misspelt field fails both.
The CPU rule: a made-up cgroup tree as the kubelet writes it for the manifest's CPU
limit gives, read by cpp_runtime/core/cpu_budget.cpp itself, the threads the manifest
records."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import Build, run_cmd

from aoti_deploy.cli.main import app as cli_app
from aoti_deploy.errors import AotiDeployError
from aoti_deploy.package.spec import DimSpec, PackageSpec, TensorSpec
from aoti_deploy.serve import kubernetes as k8s
from aoti_deploy.serve.kubernetes import (
    CpuBudget,
    KubernetesSettings,
    cpu_budget,
    default_intra_op_threads,
    kubernetes_budget,
    kubernetes_manifests,
    manifest_text,
    write_manifests,
)
from aoti_deploy.serve.triton_config import triton_config
from aoti_deploy.serve.triton_repository import CONFIG_NAME, RepositoryModel

yaml = pytest.importorskip("yaml", reason="needs PyYAML (the k8s extra)")

# Kubernetes versions the generated objects must validate against: an older and a
# recent release, both bundled by the pinned kubernetes-validate.
KUBERNETES_VERSIONS = ("1.30", "1.34")
KSERVE_SCHEMA = Path(__file__).parent / "kserve" / "inferenceservice-v1beta1.schema.json"
BATCHED = TensorSpec((DimSpec(1, 8), DimSpec(3, 3), DimSpec(1, 64)), "float32")


@pytest.fixture(scope="module")
def kubernetes_validate() -> Any:
    """kubernetes-validate, or a skip; a failure where ./scripts/test.sh asks for it
    (AOTI_DEPLOY_REQUIRE_K8S=1): CI must not pass by skipping these checks."""
    try:
        import kubernetes_validate
    except ImportError as error:
        reason = f"needs kubernetes-validate (pip install -e '.[k8s]'): {error}"
        if os.environ.get("AOTI_DEPLOY_REQUIRE_K8S") == "1":
            pytest.fail(f"AOTI_DEPLOY_REQUIRE_K8S=1, but {reason}", pytrace=False)
        pytest.skip(reason)
    return kubernetes_validate


def validate(module: Any, obj: dict[str, Any], version: str) -> None:
    """Strict validation of a built-in kind; KServe's kind against the vendored schema,
    with the Kubernetes types it refers to from kubernetes-validate's strict definitions."""
    if obj["kind"] != "InferenceService":
        module.validate(obj, version, strict=True)
        return
    import jsonschema
    from referencing import Registry, Resource

    definitions = (Path(module.__file__).parent / "kubernetes-json-schema" / f"v{version}.0-local-strict"
                   / "_definitions.json")
    schema = json.loads(KSERVE_SCHEMA.read_text())
    registry = Registry().with_resources([
        (schema["$id"], Resource.from_contents(schema)),
        ("/api/_definitions.json", Resource.from_contents(json.loads(definitions.read_text()))),
    ])
    jsonschema.Draft202012Validator(schema, registry=registry).validate(obj)


def written_model(repository: Path, *, instances: int = 2, trusted_key: Path | None = None,
                  intra_op_threads: int | None = None, name: str = "identity_conv") -> RepositoryModel:
    """What write_repository returns, from a hand-built spec: no package, no build."""
    config = triton_config(PackageSpec(inputs=[BATCHED], outputs=[BATCHED]), name, instances=instances,
                           trusted_key=trusted_key, intra_op_threads=intra_op_threads)
    (repository / name / "1").mkdir(parents=True, exist_ok=True)
    (repository / name / CONFIG_NAME).write_text(config.text())
    return RepositoryModel(repository, name, 1, repository / name / CONFIG_NAME, repository / name / "1", config,
                           signed=trusted_key is not None)


@pytest.fixture
def public_key(tmp_path: Path) -> Path:
    # A PEM public key's shape is all the manifests read; its bytes are not checked here.
    key = tmp_path / "keys" / "signing.pub"
    key.parent.mkdir()
    key.write_text("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n")
    return key


def manifests_for(tmp_path: Path, settings: KubernetesSettings = KubernetesSettings(), **model: Any) -> k8s.Manifests:
    written = written_model(tmp_path / "models", **model)
    budget = kubernetes_budget(written.repository, written.name, instances=written.config.instances,
                               intra_op_threads=model.get("intra_op_threads"), settings=settings)
    return kubernetes_manifests(written, budget, settings)


# --- the objects against the API schemas -----------------------------------------------

@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kserve", [False, True], ids=["deployment", "kserve"])
def test_every_object_validates_strictly(tmp_path: Path, public_key: Path, kubernetes_validate: Any, version: str,
                                         kserve: bool) -> None:
    manifests = manifests_for(tmp_path, KubernetesSettings(kserve=kserve), trusted_key=public_key)
    kinds = sorted(obj["kind"] for obj in manifests.objects.values())
    expected = ["InferenceService"] if kserve else ["Deployment", "Service"]
    assert kinds == sorted(["ConfigMap", "PersistentVolumeClaim", *expected])
    for file_name, obj in manifests.objects.items():
        # What is validated is what the file holds, read back.
        validate(kubernetes_validate, yaml.safe_load(manifest_text(manifests, file_name)), version)


@pytest.mark.parametrize(("file_name", "path", "field", "misspelt"), [
    ("deployment.yaml", ["spec", "template", "spec", "containers", 0], "readinessProbe", "readinesProbe"),
    ("deployment.yaml", ["spec", "strategy", "rollingUpdate"], "maxUnavailable", "maxUnavailabel"),
    ("service.yaml", ["spec", "ports", 0], "targetPort", "targetport"),
    ("persistentvolumeclaim.yaml", ["spec"], "accessModes", "accesModes"),
    # KServe's kind, against the vendored schema.
    ("inferenceservice.yaml", ["spec", "predictor", "model"], "storageUri", "storageURI"),
    ("inferenceservice.yaml", ["spec", "predictor"], "minReplicas", "minReplica"),
    ("inferenceservice.yaml", ["spec", "predictor", "model", "modelFormat"], "name", "nmae"),
])
def test_a_misspelt_field_fails_validation(tmp_path: Path, kubernetes_validate: Any, file_name: str,
                                           path: list[Any], field: str, misspelt: str) -> None:
    import jsonschema

    kserve = file_name == "inferenceservice.yaml"
    obj = manifests_for(tmp_path, KubernetesSettings(kserve=kserve)).objects[file_name]
    validate(kubernetes_validate, obj, KUBERNETES_VERSIONS[-1])
    parent = obj
    for key in path:
        parent = parent[key]
    parent[misspelt] = parent.pop(field)
    error = jsonschema.ValidationError if kserve else kubernetes_validate.ValidationError
    with pytest.raises(error, match=misspelt):
        validate(kubernetes_validate, obj, KUBERNETES_VERSIONS[-1])


# --- what the objects say ----------------------------------------------------------------

def test_deployment_serves_the_repository_read_only_with_probes_and_a_surge_rollout(tmp_path: Path) -> None:
    manifests = manifests_for(tmp_path, KubernetesSettings(replicas=3, image="registry.example/triton-aoti:1"))
    deployment = manifests.objects["deployment.yaml"]
    spec = deployment["spec"]
    assert spec["replicas"] == 3
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/triton-aoti:1"
    assert container["args"] == ["tritonserver", "--model-repository=/models",
                                 "--backend-directory=/opt/aoti-deploy/backends", "--model-control-mode=poll",
                                 "--repository-poll-secs=15"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["volumeMounts"] == [{"name": "models", "mountPath": "/models", "readOnly": True}]
    assert pod["volumes"] == [{"name": "models", "persistentVolumeClaim": {
        "claimName": "triton-identity-conv-models", "readOnly": True}}]
    assert manifests.objects["persistentvolumeclaim.yaml"]["metadata"]["name"] == "triton-identity-conv-models"
    service = manifests.objects["service.yaml"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 8000, "http"), ("grpc", 8001, "grpc"), ("metrics", 8002, "metrics")]
    assert k8s.DEFAULT_IMAGE == "nvcr.io/nvidia/tritonserver:24.10-py3"  # tritonserver 2.51, as the triton extra


def test_a_trusted_key_becomes_an_immutable_config_map_and_the_server_wide_key(tmp_path: Path,
                                                                               public_key: Path) -> None:
    manifests = manifests_for(tmp_path, trusted_key=public_key)
    config_map = manifests.objects["configmap-trusted-key.yaml"]
    assert config_map["immutable"] is True and config_map["data"] == {"trusted-key.pub": public_key.read_text()}
    pod = manifests.objects["deployment.yaml"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The config names the key by a path on this machine; the server's setting wins over it.
    assert "--backend-config=aoti,trusted-key=/etc/aoti-deploy/trusted-key/trusted-key.pub" in container["args"]
    assert {"name": "trusted-key", "mountPath": "/etc/aoti-deploy/trusted-key", "readOnly": True} in container[
        "volumeMounts"]
    assert {"name": "trusted-key", "configMap": {"name": config_map["metadata"]["name"]}} in pod["volumes"]
    # Another key is another ConfigMap, so changing it rolls the pods.
    public_key.write_text(public_key.read_text().replace("MFkw", "MFkx"))
    assert manifests_for(tmp_path / "other", trusted_key=public_key).objects["configmap-trusted-key.yaml"][
        "metadata"]["name"] != config_map["metadata"]["name"]


def test_kserve_replaces_the_deployment_with_an_inference_service(tmp_path: Path, public_key: Path) -> None:
    manifests = manifests_for(tmp_path, KubernetesSettings(kserve=True, replicas=3), trusted_key=public_key)
    assert "deployment.yaml" not in manifests.objects and "service.yaml" not in manifests.objects
    service = manifests.objects["inferenceservice.yaml"]
    assert service["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    predictor = service["spec"]["predictor"]
    assert predictor["minReplicas"] == predictor["maxReplicas"] == 3
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "triton"} and model["storageUri"] == "pvc://triton-identity-conv-models"
    assert model["args"][-1] == "--backend-config=aoti,trusted-key=/etc/aoti-deploy/trusted-key/trusted-key.pub"
    assert model["resources"]["limits"] == model["resources"]["requests"] == {"cpu": "3", "memory": "2Gi"}
    other = manifests_for(tmp_path / "s3", KubernetesSettings(kserve=True, storage_uri="s3://bucket/models"))
    assert other.objects["inferenceservice.yaml"]["spec"]["predictor"]["model"]["storageUri"] == "s3://bucket/models"
    assert "persistentvolumeclaim.yaml" not in other.objects


def test_yaml_files_hold_the_objects_under_the_cpu_rule(tmp_path: Path) -> None:
    manifests = manifests_for(tmp_path)
    paths = write_manifests(manifests, tmp_path / "k8s")
    assert sorted(p.name for p in paths) == ["deployment.yaml", "persistentvolumeclaim.yaml", "service.yaml"]
    for path in paths:
        text = path.read_text()
        assert text.startswith("# Written by aoti-deploy triton-repository for triton-identity-conv.\n# intra-op")
        assert "&id" not in text and yaml.safe_load(text) == manifests.objects[path.name]


# --- the CPU rule ------------------------------------------------------------------------

@pytest.mark.parametrize(("instances", "threads", "cpu_limit", "cpus", "expected_threads"), [
    (1, None, None, 2, 1),  # one instance, one thread, one CPU for Triton's threads
    (2, None, None, 3, 1),
    (2, 3, None, 7, 3),  # instances x threads + 1
    (2, None, 7, 7, 3),  # (7 - 1) / 2
    (2, None, 8, 8, 3),  # (8 - 1) / 2, rounded down: the spare CPU stays with Triton
    (4, None, 2, 2, 1),  # at least 1
    (3, 2, 7, 7, 2),
])
def test_cpu_budget(instances: int, threads: int | None, cpu_limit: int | None, cpus: int,
                    expected_threads: int) -> None:
    budget = cpu_budget(instances, intra_op_threads=threads, cpu_limit=cpu_limit)
    assert (budget.cpus, budget.intra_op_threads) == (cpus, expected_threads)
    assert budget.intra_op_threads == default_intra_op_threads(budget.cpus, instances) or threads is not None
    assert f"({cpus} - 1) / {instances} = {expected_threads}" in budget.rule


def test_a_cpu_limit_that_disagrees_with_the_threads_is_refused() -> None:
    with pytest.raises(AotiDeployError, match=r"--cpu-limit 4 and --intra-op-threads 2 disagree.*use --cpu-limit 5"):
        cpu_budget(2, intra_op_threads=2, cpu_limit=4)


def test_the_budget_counts_every_model_the_server_loads(tmp_path: Path) -> None:
    pytest.importorskip("tritonclient.grpc.model_config_pb2", reason="needs the triton extra")
    repository = tmp_path / "models"
    written_model(repository, instances=3, name="other")
    manifests = manifests_for(tmp_path, instances=2)
    assert (manifests.budget.server_instances, manifests.budget.cpus) == (5, 6)
    # Rewriting a model replaces its own count.
    budget = kubernetes_budget(repository, "other", instances=1)
    assert (budget.server_instances, budget.cpus) == (3, 4)


def kubelet_tree(cpu_limit: str, version: int) -> tuple[str, dict[str, str]]:
    """The cgroup files the kubelet writes for a container with ``cpu_limit`` (quota =
    millicores x period / 1000, period 100 ms) under a pod and a node without quotas,
    by path below the cgroup mount, and the container's /proc/self/cgroup text."""
    millicores = int(cpu_limit[:-1]) if cpu_limit.endswith("m") else int(float(cpu_limit) * 1000)
    quota = millicores * 100_000 // 1000
    container = "kubepods.slice/kubepods-pod1.slice/cri-containerd-1.scope"
    files = {}
    for level in ["", "kubepods.slice", "kubepods.slice/kubepods-pod1.slice", container]:
        if version == 2:
            files[str(Path(level, "cpu.max"))] = f"{quota if level == container else 'max'} 100000\n"
        else:
            files[str(Path("cpu", level, "cpu.cfs_quota_us"))] = f"{quota if level == container else -1}\n"
            files[str(Path("cpu", level, "cpu.cfs_period_us"))] = "100000\n"
    membership = f"0::/{container}\n" if version == 2 else f"12:memory:/{container}\n4:cpu,cpuacct:/{container}\n"
    return membership, files


def backend_budget(build: Build, tmp_path: Path, membership: str, files: dict[str, str], instances: int) -> dict:
    """The CPUs and default intra-op threads the aoti backend takes in that cgroup tree,
    on a 64-CPU node: cpp_runtime/core/cpu_budget.cpp itself, through the contract tool
    (tests/contract/cpu_budget_vectors.json pins the rule)."""
    vectors = tmp_path / "cgroup_vector.json"
    vectors.write_text(json.dumps({"vectors": [{"name": "pod", "membership": membership, "files": files,
                                                "affinity": 64, "server_instances": instances}]}))
    result = run_cmd(build.dir / "contract_vectors", "cpu_budget", vectors)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["pod"]


@pytest.mark.parametrize("version", [2, 1], ids=["cgroup-v2", "cgroup-v1"])
@pytest.mark.parametrize(("instances", "threads"), [(1, 1), (2, 1), (2, 3), (4, 2)])
def test_the_containers_cgroup_cpu_limit_sets_the_default_thread_count(build: Build, tmp_path: Path, version: int,
                                                                       instances: int, threads: int) -> None:
    """The manifest's CPU limit, written into a cgroup tree as the kubelet does, read
    back as the backend does on a 64-CPU node, gives the backend's default threads:
    the ones the manifest records."""
    manifests = manifests_for(tmp_path, instances=instances, intra_op_threads=threads)
    (container,) = manifests.objects["deployment.yaml"]["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["cpu"]
    assert container["resources"]["requests"]["cpu"] == limit  # Guaranteed QoS: no bursting past the budget
    budget = backend_budget(build, tmp_path, *kubelet_tree(limit, version), instances)
    assert budget["cpus"] == int(limit) == instances * threads + 1
    assert budget["intra_op_threads"] == default_intra_op_threads(budget["cpus"], instances) == threads
    assert threads == manifests.budget.intra_op_threads
    assert manifests.budget == CpuBudget(budget["cpus"], instances, threads, explicit_threads=True)


# --- the command line ----------------------------------------------------------------------

def test_cli_writes_the_manifests_beside_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       kubernetes_validate: Any) -> None:
    from aoti_deploy.serve import deployment as deployment_stage

    calls = []

    def fake_write_repository(package: Any, repository: Any, **options: Any) -> RepositoryModel:
        calls.append(options)
        return written_model(Path(repository), instances=options["instances"])

    monkeypatch.setattr(deployment_stage, "write_repository", fake_write_repository)
    (tmp_path / "model.pt2").write_bytes(b"")
    result = CliRunner().invoke(cli_app, [
        "triton-repository", str(tmp_path / "model.pt2"), "--repository", str(tmp_path / "models"),
        "--name", "identity_conv", "--instances", "2", "--kubernetes", str(tmp_path / "k8s"),
        "--replicas", "3", "--cpu-limit", "5", "--image", "registry.example/triton-aoti:1"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "(5 - 1) / 2 = 2" in result.output and f"kubectl apply -f {tmp_path / 'k8s'}" in result.output
    deployment = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())
    kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/triton-aoti:1" and container["resources"]["limits"]["cpu"] == "5"
    # The backend derives its threads from the limit: the config does not set them.
    assert calls[0]["intra_op_threads"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--cpu-limit", "4", "--intra-op-threads", "2", "--instances", "2"], "use --cpu-limit 5"),
    (["--memory", "two gigs"], "is not a Kubernetes quantity"),
    (["--storage-uri", "s3://bucket/models"], "--storage-uri is for --kserve"),
    (["--replicas", "3", "--no-manifests"], "are for the manifests: pass --kubernetes DIR"),
])
def test_cli_refuses_bad_kubernetes_options_before_writing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    args: list[str], message: str) -> None:
    from aoti_deploy.serve import deployment

    def no_write(*_: Any, **__: Any) -> None:
        raise AssertionError("the repository was written despite a bad option")

    monkeypatch.setattr(deployment, "write_repository", no_write)
    (tmp_path / "model.pt2").write_bytes(b"")
    manifests = [] if "--no-manifests" in args else ["--kubernetes", str(tmp_path / "k8s")]
    result = CliRunner().invoke(cli_app, ["triton-repository", str(tmp_path / "model.pt2"), "--repository",
                                          str(tmp_path / "models"), *manifests,
                                          *(arg for arg in args if arg != "--no-manifests")], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()) and not (tmp_path / "k8s").exists()


def test_package_to_triton_writes_the_manifests_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aoti_deploy as ad
    from aoti_deploy.serve import deployment

    monkeypatch.setattr(deployment, "write_repository", lambda package, repository, **options: written_model(
        Path(repository), instances=options["instances"]))
    package = ad.Package(tmp_path / "model.pt2", None)
    folder = package.to_triton(tmp_path / "models", "identity_conv", instances=3, kubernetes=tmp_path / "k8s",
                               kubernetes_settings=ad.KubernetesSettings(replicas=4))
    assert folder == tmp_path / "models" / "identity_conv"
    manifest = yaml.safe_load((tmp_path / "k8s" / "deployment.yaml").read_text())
    assert manifest["spec"]["replicas"] == 4
    assert manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "4"
    with pytest.raises(AotiDeployError, match="--replicas must be at least 1"):
        package.to_triton(tmp_path / "models", kubernetes=tmp_path / "k8s",
                          kubernetes_settings=ad.KubernetesSettings(replicas=0))
