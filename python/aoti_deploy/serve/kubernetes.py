"""Kubernetes manifests for serving a Triton model repository with the `aoti` backend:
tritonserver pods in a Deployment (or a KServe InferenceService) with the repository
mounted read-only, the Service in front of them, and a CPU limit that agrees with the
intra-op threads the backend gives each model instance."""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AotiDeployError, PackageError

if TYPE_CHECKING:
    from .triton_repository import RepositoryModel

# NVIDIA's Triton image of the server the triton extra ships (tritonserver 2.51 is the
# 24.10 release). It holds no aoti backend: build an image FROM it with this project's
# `cmake --install` tree copied to INSTALL_PREFIX (docs/kubernetes.md).
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
INSTALL_PREFIX = "/opt/aoti-deploy"  # backends/aoti/libtriton_aoti.so, lib/libtorch_cpu.so, ...
HTTP_PORT, GRPC_PORT, METRICS_PORT = 8000, 8001, 8002
MODELS_MOUNT = "/models"
KEY_MOUNT = "/etc/aoti-deploy/trusted-key"
KEY_FILE = "trusted-key.pub"
POLL_SECONDS = 15
DEFAULT_MEMORY = "2Gi"
# KServe's kserve-tritonserver runtime serves HTTP on 8080 and reads the model
# repository from /mnt/models, where storageUri is mounted.
KSERVE_HTTP_PORT = 8080
# The annotation that records the CPU rule on the workload.
CPU_RULE_ANNOTATION = "aoti-deploy/cpu-rule"

_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?")


def _usage(message: str) -> AotiDeployError:
    return AotiDeployError(message, kind="usage")


def default_intra_op_threads(cpus: int, server_instances: int) -> int:
    """The backend's default intra-op threads per instance: one CPU is left to
    Triton's own threads, the rest shared out among every instance the server has
    loaded, at least 1: ``(cpus - 1) // server_instances``. The C++ rule it mirrors is
    ``intra_op_threads`` in cpp_runtime/triton/model_config.cpp (reserved = 1) over
    ``intra_op_threads_for`` in cpp_runtime/core/cpu_budget.cpp;
    tests/contract/cpu_budget_vectors.json pins both."""
    left = max(1, cpus - 1)
    return max(1, left // max(1, server_instances))


@dataclass(frozen=True)
class CpuBudget:
    """A pod's CPUs and the backend's intra-op threads, chosen to agree."""

    cpus: int  # the container's CPU request and limit, whole CPUs
    server_instances: int  # every model instance the server loads
    intra_op_threads: int  # per instance
    explicit_threads: bool  # the config sets intra_op_threads (else the backend derives it)

    @property
    def rule(self) -> str:
        """The rule and its numbers, for the manifests' annotation and comment."""
        source = ("the intra_op_threads parameter of config.pbtxt" if self.explicit_threads
                  else "the backend's default, from the container's cgroup CPU limit")
        used = self.server_instances * self.intra_op_threads + 1
        spare = (f"; the {self.cpus - used} CPU(s) the division leaves over go to Triton's own threads"
                 if self.cpus > used else "")
        return (f"intra-op threads per instance = (CPU limit - 1) / model instances in the server, at least 1: "
                f"({self.cpus} - 1) / {self.server_instances} = {self.intra_op_threads} ({source}); "
                f"CPU request = limit = instances x threads + 1 = {self.server_instances} x "
                f"{self.intra_op_threads} + 1{spare}")


def cpu_budget(server_instances: int, *, intra_op_threads: int | None = None,
               cpu_limit: int | None = None) -> CpuBudget:
    """The CPU limit (== request) and the intra-op threads of a tritonserver pod.

    Given neither: 1 thread per instance, and ``instances + 1`` CPUs. Given threads:
    ``instances * threads + 1`` CPUs. Given a CPU limit: the threads the backend
    derives from it. Given both, they must agree by that rule.

    Raises:
        AotiDeployError (kind usage): a number below 1, or a limit and threads that
            disagree.
    """
    if server_instances < 1:
        raise _usage(f"the server needs at least 1 model instance, got {server_instances}")
    if intra_op_threads is not None and intra_op_threads < 1:
        raise _usage(f"intra-op threads must be at least 1, got {intra_op_threads}")
    if cpu_limit is not None and cpu_limit < 1:
        raise _usage(f"--cpu-limit must be a whole number of CPUs, at least 1, got {cpu_limit}")
    if cpu_limit is None:
        threads = intra_op_threads or 1
        return CpuBudget(server_instances * threads + 1, server_instances, threads, intra_op_threads is not None)
    derived = default_intra_op_threads(cpu_limit, server_instances)
    if intra_op_threads is not None and intra_op_threads != derived:
        raise _usage(
            f"--cpu-limit {cpu_limit} and --intra-op-threads {intra_op_threads} disagree: with {server_instances} "
            f"model instance(s) in the server, a limit of {cpu_limit} CPUs gives ({cpu_limit} - 1) / "
            f"{server_instances} = {derived} thread(s) per instance; for {intra_op_threads} use --cpu-limit "
            f"{server_instances * intra_op_threads + 1}, or give only one of the two"
        )
    return CpuBudget(cpu_limit, server_instances, derived, intra_op_threads is not None)


def _instance_count(config_text: str) -> int:
    """The instance count a config.pbtxt asks for: the sum of its instance_group
    counts (a group without one has 1), 1 without any group."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    return sum(group.count or 1 for group in config.instance_group) or 1


def server_instances(repository: str | os.PathLike[str], name: str, instances: int) -> int:
    """The model instances a tritonserver polling ``repository`` loads once model
    ``name`` is (re)written with ``instances``: that count plus every other model's.

    Raises:
        AotiDeployError (kind usage): another model's config cannot be read (it needs
            the triton extra's parser).
    """
    from .triton_repository import CONFIG_NAME

    repository = Path(repository)
    total = instances
    others = sorted(p for p in repository.glob(f"*/{CONFIG_NAME}") if p.parent.name != name) \
        if repository.is_dir() else []
    for config in others:
        try:
            total += _instance_count(config.read_text(encoding="utf-8"))
        except ImportError as error:
            raise _usage(f"{repository} holds other models, whose instances share the pod's CPUs; reading their "
                         f"configs needs the triton extra (pip install -e '.[triton]'): {error}") from error
        except Exception as error:  # a config the parser refuses: its instances are unknown
            raise _usage(f"cannot count the instances of {config}: {error}") from error
    return total


def dns_label(text: str) -> str:
    """A Kubernetes object name from a model name: lower case, '-' for anything
    else, at most 63 characters, starting with a letter (``triton-`` in front)."""
    label = re.sub(r"[^a-z0-9-]+", "-", f"triton-{text.lower()}").strip("-")
    return label[:63].rstrip("-")


def _check_quantity(value: str, option: str) -> str:
    if not _QUANTITY.fullmatch(value):
        raise _usage(f"{option} {value!r} is not a Kubernetes quantity (e.g. 2Gi, 512Mi)")
    return value


@dataclass(frozen=True)
class KubernetesSettings:
    """How the manifests run the server; the CPU budget is computed separately."""

    image: str = DEFAULT_IMAGE
    replicas: int = 2
    memory: str = DEFAULT_MEMORY  # request == limit: with CPUs equal too, the pod is Guaranteed QoS
    claim: str | None = None  # the repository's PersistentVolumeClaim; default <app>-models
    kserve: bool = False  # an InferenceService instead of the Deployment and Service
    storage_uri: str | None = None  # KServe only; default pvc://<claim>
    cpu_limit: int | None = None  # whole CPUs; default from the instances and threads


@dataclass(frozen=True)
class Manifests:
    """The objects, each to become one YAML file, and what they assume."""

    objects: dict[str, dict[str, Any]]  # file name -> object
    budget: CpuBudget
    app: str
    notes: list[str] = field(default_factory=list)


def _repository_size(repository: Path) -> int:
    return sum(p.stat().st_size for p in repository.rglob("*") if p.is_file())


def _claim(name: str, repository: Path, labels: dict[str, str]) -> dict[str, Any]:
    # Room for the repository twice over (a new version beside the old), at least 1Gi.
    gib = max(1, math.ceil(2 * _repository_size(repository) / 2**30))
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            # Every replica mounts it read-only; whoever publishes versions writes it.
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": f"{gib}Gi"}},
        },
    }


def _key_config_map(app: str, key: Path, labels: dict[str, str]) -> dict[str, Any]:
    pem = key.read_text(encoding="ascii")
    # The name carries the key's digest: a new key is a new ConfigMap, and so a rollout.
    digest = hashlib.sha256(pem.encode()).hexdigest()[:10]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{app}-trusted-key-{digest}"[:253], "labels": labels},
        "immutable": True,
        "data": {KEY_FILE: pem},
    }


def _probe(path: str, port: int | str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period, "failureThreshold": failures}


def kubernetes_manifests(written: RepositoryModel, budget: CpuBudget,
                         settings: KubernetesSettings = KubernetesSettings()) -> Manifests:
    """The Kubernetes objects that serve ``written``'s repository.

    Args:
        written: what write_repository wrote (its repository is what the volume holds).
        budget: the pod's CPUs and threads (``cpu_budget``).
        settings: image, replicas, memory, the claim, and KServe or not.

    Returns:
        Manifests: file name -> object (persistentvolumeclaim.yaml, deployment.yaml and
        service.yaml, or inferenceservice.yaml; configmap-trusted-key.yaml when the
        config names a trusted key), with notes on what they assume.

    Raises:
        AotiDeployError (kind usage): a bad replica count or quantity.
        PackageError: the trusted key named by the config cannot be read.
    """
    from .triton_config import PARAM_INTRA_OP_THREADS, PARAM_TRUSTED_KEY

    if settings.replicas < 1:
        raise _usage(f"--replicas must be at least 1, got {settings.replicas}")
    memory = _check_quantity(settings.memory, "--memory")
    app = dns_label(written.name)
    claim = settings.claim or f"{app}-models"
    labels = {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "aoti-deploy"}
    selector = {"app.kubernetes.io/name": app}
    annotations = {CPU_RULE_ANNOTATION: budget.rule}
    resources = {"requests": {"cpu": str(budget.cpus), "memory": memory},
                 "limits": {"cpu": str(budget.cpus), "memory": memory}}
    notes = [f"CPU: {budget.rule}"]

    objects: dict[str, dict[str, Any]] = {}
    parameters = dict(written.config.parameters)
    if parameters.get(PARAM_INTRA_OP_THREADS, str(budget.intra_op_threads)) != str(budget.intra_op_threads):
        raise _usage(f"the config sets {parameters[PARAM_INTRA_OP_THREADS]} intra-op threads per instance, but the "
                     f"CPU budget is for {budget.intra_op_threads}; compute it with kubernetes_budget")
    key_arg: list[str] = []
    key_volume: list[dict[str, Any]] = []
    key_mount: list[dict[str, Any]] = []
    if PARAM_TRUSTED_KEY in parameters:
        key = Path(parameters[PARAM_TRUSTED_KEY])
        try:
            config_map = _key_config_map(app, key, labels)
        except (OSError, UnicodeDecodeError) as error:
            raise PackageError(f"could not read the trusted key {key}: {error}", kind="bad_key") from error
        objects["configmap-trusted-key.yaml"] = config_map
        # The server-wide key wins over the config's trusted_key (a path on this machine).
        key_arg = [f"--backend-config=aoti,trusted-key={KEY_MOUNT}/{KEY_FILE}"]
        key_volume = [{"name": "trusted-key", "configMap": {"name": config_map["metadata"]["name"]}}]
        key_mount = [{"name": "trusted-key", "mountPath": KEY_MOUNT, "readOnly": True}]
        notes.append(f"trusted key: {key} as ConfigMap {config_map['metadata']['name']} (a public key: "
                     "not secret, but whoever may edit it decides what the pods load), mounted at "
                     f"{KEY_MOUNT}; every model in the repository must be signed by it")
    server_args = [f"--backend-directory={INSTALL_PREFIX}/backends", "--model-control-mode=poll",
                   f"--repository-poll-secs={POLL_SECONDS}"]

    if settings.storage_uri is None or not settings.kserve:
        objects["persistentvolumeclaim.yaml"] = _claim(claim, written.repository, labels)
    if settings.kserve:
        model: dict[str, Any] = {
            "modelFormat": {"name": "triton"},
            "protocolVersion": "v2",
            "storageUri": settings.storage_uri or f"pvc://{claim}",
            "image": settings.image,
            # KServe appends these to its runtime's tritonserver arguments.
            "args": [*server_args, *key_arg],
            "resources": resources,
            "readinessProbe": _probe("/v2/health/ready", KSERVE_HTTP_PORT, 5, 3),
            "livenessProbe": _probe("/v2/health/live", KSERVE_HTTP_PORT, 10, 3),
        }
        if key_mount:
            model["volumeMounts"] = key_mount
        predictor: dict[str, Any] = {"minReplicas": settings.replicas, "maxReplicas": settings.replicas,
                                     "model": model}
        if key_volume:
            predictor["volumes"] = key_volume
        objects["inferenceservice.yaml"] = {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": app, "labels": labels,
                         # A plain Deployment, Service and autoscaler: no Knative.
                         "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment", **annotations}},
            "spec": {"predictor": predictor},
        }
        notes.append("KServe: the runtime that serves modelFormat triton (kserve-tritonserver) must take this "
                     f"image, which holds the aoti backend; HTTP on {KSERVE_HTTP_PORT}, the repository at /mnt/models")
    else:
        container = {
            "name": "tritonserver",
            "image": settings.image,
            "args": ["tritonserver", f"--model-repository={MODELS_MOUNT}", *server_args, *key_arg],
            "ports": [{"name": "http", "containerPort": HTTP_PORT}, {"name": "grpc", "containerPort": GRPC_PORT},
                      {"name": "metrics", "containerPort": METRICS_PORT}],
            # Out of the Service's endpoints until every model has loaded; restarted when
            # the server stops answering; 5 minutes to load before liveness counts.
            "readinessProbe": _probe("/v2/health/ready", "http", 5, 3),
            "livenessProbe": _probe("/v2/health/live", "http", 10, 3),
            "startupProbe": _probe("/v2/health/live", "http", 10, 30),
            "resources": resources,
            "volumeMounts": [{"name": "models", "mountPath": MODELS_MOUNT, "readOnly": True}, *key_mount],
        }
        objects["deployment.yaml"] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": app, "labels": labels, "annotations": annotations},
            "spec": {
                "replicas": settings.replicas,
                "selector": {"matchLabels": selector},
                # One new pod at a time, and none taken out before its successor is ready.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": {
                        "containers": [container],
                        "volumes": [{"name": "models",
                                     "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
                                    *key_volume],
                    },
                },
            },
        }
        objects["service.yaml"] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": app, "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                          for name, port in (("http", HTTP_PORT), ("grpc", GRPC_PORT), ("metrics", METRICS_PORT))],
            },
        }
    return Manifests(objects, budget, app, notes)


def manifest_text(manifests: Manifests, file_name: str) -> str:
    """One object as YAML, under a comment that states the CPU rule."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # shared label dicts written out, not as &anchors
            return True

    header = "\n".join(f"# {line}" for line in (
        f"Written by aoti-deploy triton-repository for {manifests.app}.",
        manifests.budget.rule,
    ))
    return header + "\n" + yaml.dump(manifests.objects[file_name], Dumper=Dumper, sort_keys=False, width=1000)


def write_manifests(manifests: Manifests, directory: str | os.PathLike[str]) -> list[Path]:
    """Write each object to ``directory``/<file name> (made if missing); returns the paths.

    Raises:
        AotiDeployError (kind usage): PyYAML is missing (the k8s extra).
        PackageError: a file cannot be written.
    """
    try:
        import yaml  # noqa: F401
    except ImportError as error:
        raise _usage(f"writing Kubernetes manifests needs PyYAML (pip install -e '.[k8s]'): {error}") from error
    directory = Path(directory)
    paths = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for file_name in manifests.objects:
            path = directory / file_name
            path.write_text(manifest_text(manifests, file_name), encoding="utf-8")
            paths.append(path)
    except OSError as error:
        raise PackageError(f"could not write the manifests into {directory}: {error.strerror or error}",
                           kind="bundle_output") from error
    return paths


def kubernetes_budget(repository: str | os.PathLike[str], name: str, *, instances: int = 1,
                      intra_op_threads: int | None = None,
                      settings: KubernetesSettings = KubernetesSettings()) -> CpuBudget:
    """Check the settings and compute the pod's CPU budget for model ``name`` about to
    be written into ``repository`` with ``instances`` (other models there load too), before
    anything is written.

    Raises:
        AotiDeployError (kind usage): replicas below 1, a bad quantity, a storage URI
            without KServe, or a CPU limit and threads that disagree (``cpu_budget``).
    """
    if settings.replicas < 1:
        raise _usage(f"--replicas must be at least 1, got {settings.replicas}")
    _check_quantity(settings.memory, "--memory")
    if settings.storage_uri is not None and not settings.kserve:
        raise _usage("--storage-uri is for --kserve; the Deployment mounts the claim (--claim)")
    return cpu_budget(server_instances(repository, name, instances), intra_op_threads=intra_op_threads,
                      cpu_limit=settings.cpu_limit)
