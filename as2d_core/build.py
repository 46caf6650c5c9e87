"""Building targets and sources by their registered names, from options or a task configuration.

The CLI, the benchmark, the tuning commands and the server all build parts the same way, so this
lives beside the registry rather than in any one command.
"""
from __future__ import annotations

from pathlib import Path

from .config import Config, Report, check_file
from .paths import models_dir
from .plugins import load_registry
from .process_source import ProcessSource

DEFAULT_TARGET = "whisper-base"
# The faster drafter on the user's clock (BENCHMARKS.md section 6); the serial baselines of
# ``as2d bench`` keep the ONNX Runtime one, which can score a prefix.
DEFAULT_SOURCE = "whisper-tiny.en-ct2"
PROCESS_SUFFIX = "+process"


class ConfigProblem(ValueError):
    """A configuration that cannot run here; the message names every problem, one per line."""


def build_part(kind: str, name: str, **options):
    """Instantiate a registered target or source by name, with plugin-specific options."""
    part = load_registry().get(kind, name)
    options.setdefault("models_dir", models_dir())
    return part.factory(options)


def build_source(spec: str, **options):
    """A registered source by name; ``NAME+process`` runs it in its own process (``process_source``)."""
    if not spec.endswith(PROCESS_SUFFIX):
        return build_part("source", spec, **options)
    name = spec[: -len(PROCESS_SUFFIX)]
    load_registry().get("source", name)  # an unknown name fails here, listing what is installed
    options.setdefault("models_dir", models_dir())
    return ProcessSource.from_registry(name, options, name=spec)


def parts_from_config(path: Path, overrides: dict | None = None, with_source: bool | None = None):
    """Validate a task configuration and build its target and source.

    Returns ``(config, report, target, source)``; raises :class:`ConfigProblem` naming every
    problem. ``with_source`` defaults to the configuration's own method (a source only for as2d).
    """
    report: Report = check_file(path, overrides=overrides or {})
    if not report.runnable:
        problems = report.errors + [f"cannot run here: {m}" for m in report.missing]
        raise ConfigProblem("\n".join(f"{path}: {p}" for p in problems))
    config: Config = report.config
    target = build_part("target", config.target.model, backend=config.target.backend,
                        device=report.devices["target"], threads=config.target.threads)
    source = None
    if config.source is not None and (with_source if with_source is not None else config.method == "as2d"):
        spec = config.source.name + (PROCESS_SUFFIX if config.source.process else "")
        source = build_source(spec, backend=config.source.backend,
                              device=report.devices.get("source", config.source.device), threads=config.source.threads)
    return config, report, target, source
