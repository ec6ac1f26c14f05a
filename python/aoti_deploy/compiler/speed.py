"""The Inductor settings a CPU package gets by default because they measured fastest
on real models (docs/performance-real-models.md has the table and the command that made it), and
the rule that keeps them honest: a setting that makes a model's compile fail, or its
package fail the check against eager, is dropped for that model and the package
compiled again without it. The export says what it dropped and why; no package ships
unverified.

A setting the user gave, either way (``inductor_configs={"freezing": False}``), is
theirs: the defaults never override it, and it is never dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .options import ExportOptions


@dataclass(frozen=True)
class SpeedSetting:
    name: str
    configs: dict[str, Any]


# In order of importance: when one must go, the last one still applied goes first.
CPU_DEFAULTS: tuple[SpeedSetting, ...] = (
    # Weights become constants: oneDNN gets them prepacked in its own layout,
    # convolutions and linears fuse with their activations, constant subgraphs fold.
    SpeedSetting("freezing", {"freezing": True}),
)


def default_settings(options: ExportOptions) -> list[SpeedSetting]:
    """The speed settings this export starts with: the CPU defaults for a .pt2 package
    with ``optimize`` on, less any whose configs the user set."""
    if options.target != "pt2" or options.device != "cpu" or not options.optimize:
        return []
    given = set(options.inductor_configs)
    return [setting for setting in CPU_DEFAULTS if not given & set(setting.configs)]


def recorded_settings(recorded: dict[str, Any], options: ExportOptions) -> list[str]:
    """The names of the defaults a package compiled with, from the Inductor settings it
    records (a reused package's, whose compile is not repeated)."""
    return [setting.name for setting in default_settings(options)
            if all(recorded.get(key) == value for key, value in setting.configs.items())]


def compile_configs(settings: list[SpeedSetting], options: ExportOptions) -> dict[str, Any]:
    """The Inductor configs of one compile: the settings applied, under the user's."""
    configs: dict[str, Any] = {}
    for setting in settings:
        configs.update(setting.configs)
    return {**configs, **options.inductor_configs}


def settings_summary(applied: list[SpeedSetting], dropped: list[tuple[SpeedSetting, str]]) -> str:
    """One line for the package's optimizations record and the export's summary."""
    parts = [f"speed settings: {', '.join(s.name for s in applied) if applied else 'none'}"]
    parts += [f"dropped {setting.name} ({reason})" for setting, reason in dropped]
    return "; ".join(parts)
