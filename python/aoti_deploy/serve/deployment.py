"""A package published into a Triton model repository, with Kubernetes manifests for
it when asked: the one route ``Package.to_triton`` and ``aoti-deploy
triton-repository`` take. A bad manifest setting is refused before anything is
written."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AotiDeployError
from .kubernetes import KubernetesSettings, Manifests, kubernetes_budget, kubernetes_manifests, write_manifests
from .triton_repository import RepositoryModel, default_model_name, write_repository


@dataclass
class TritonDeployment:
    """What was written: the model's version in the repository, and the manifests
    (None without ``kubernetes``) with their files."""

    model: RepositoryModel
    manifests: Manifests | None = None
    manifest_paths: list[Path] = field(default_factory=list)


def deploy_to_triton(
    package: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    name: str | None = None,
    *,
    kubernetes: str | os.PathLike[str] | None = None,
    kubernetes_settings: KubernetesSettings | None = None,
    **config: Any,
) -> TritonDeployment:
    """Write ``package`` into ``repository`` as ``name`` (default: the package's file
    name) with write_repository's ``config``; with ``kubernetes``, also write the
    manifests that serve the repository into that folder.

    Raises:
        AotiDeployError (kind usage): ``kubernetes_settings`` other than the defaults
            without ``kubernetes``; write_repository's and the manifests' errors.
    """
    name = name or default_model_name(Path(package))
    settings = kubernetes_settings or KubernetesSettings()
    if kubernetes is None and settings != KubernetesSettings():
        raise AotiDeployError("kubernetes_settings are for the manifests: pass kubernetes=DIR", kind="usage")
    budget = None
    if kubernetes is not None:  # checked before the repository is written, so a bad setting writes nothing
        budget = kubernetes_budget(repository, name, instances=config.get("instances", 1),
                                   intra_op_threads=config.get("intra_op_threads"), settings=settings)
    written = write_repository(package, repository, name=name, **config)
    if kubernetes is None or budget is None:
        return TritonDeployment(written)
    manifests = kubernetes_manifests(written, budget, settings)
    return TritonDeployment(written, manifests, write_manifests(manifests, kubernetes))
