"""A model repository read back as the server will load it (aoti-deploy serve): each
model's config, the versions its version_policy serves, each a readable bundle."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..package.spec import PackageSpec
from .triton_config import PARAM_TRUSTED_KEY, VersionPolicy, check_model_name, parse_config, usage_error
from .triton_repository import CONFIG_NAME, model_versions


@dataclass(frozen=True)
class ServedModel:
    """A model of a repository as the server will load it: the versions its
    version_policy serves, and the newest of them (``version``, ``bundle``, ``spec``),
    which a request without a version reaches."""

    name: str
    config: Any  # tritonclient's model_config_pb2.ModelConfig
    version: int
    bundle: Path
    spec: PackageSpec
    versions: tuple[int, ...] = ()  # every served version, oldest first
    policy: VersionPolicy = field(default_factory=lambda: VersionPolicy("latest"))

    @property
    def trusted_key(self) -> Path | None:
        value = self.config.parameters.get(PARAM_TRUSTED_KEY)
        return Path(value.string_value) if value is not None and value.string_value else None


def read_repository(repository: str | os.PathLike[str], names: Sequence[str] = ()) -> list[ServedModel]:
    """The models of a repository (the given ones, else every folder with a
    config.pbtxt), each with its config and the versions its version_policy serves
    (Triton's default: the latest), each read as a bundle.

    Raises:
        AotiDeployError (kind usage): no such repository or model, or a model with
            no version folder.
        PackageError: a config or bundle that cannot be read.
    """
    from ..package.archive import read_package_spec
    from ..package.bundle import read_layout

    repository = Path(repository)
    if not repository.is_dir():
        raise usage_error(f"model repository not found: {repository} (write one with aoti-deploy triton-repository)")
    if names:
        for name in names:
            if not (repository / check_model_name(name) / CONFIG_NAME).is_file():
                raise usage_error(
                    f"no model {name!r} in {repository}: {repository / name / CONFIG_NAME} does not exist"
                )
        chosen = list(names)
    else:
        chosen = sorted(p.name for p in repository.iterdir() if (p / CONFIG_NAME).is_file())
        if not chosen:
            raise usage_error(f"{repository} holds no model (no <name>/{CONFIG_NAME}); write one with "
                              "aoti-deploy triton-repository")
    models = []
    for name in chosen:
        model_dir = repository / name
        config = parse_config(model_dir / CONFIG_NAME)
        available = model_versions(model_dir)
        if not available:
            raise usage_error(f"model {name} in {repository} has no version folder (e.g. {model_dir / '1'})")
        policy = VersionPolicy.of_config(config)
        served = policy.served(available)
        if not served:
            raise usage_error(
                f"model {name} in {repository}: its version_policy ({policy}) serves none of the versions there "
                f"({', '.join(map(str, available))}); publish one of them or change the policy"
            )
        newest = served[-1]
        for version in served:  # every served version must be a readable bundle
            layout = read_layout(model_dir / str(version))
            spec = read_package_spec(layout.package)
            if version == newest:
                models.append(ServedModel(name, config, newest, model_dir / str(newest), spec, served, policy))
    return models
