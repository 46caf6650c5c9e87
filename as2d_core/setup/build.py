"""Building targets and sources by their registered names, from options or a task configuration.

The CLI, the benchmark, the tuning commands and the server all build parts the same way, so this
lives beside the registry rather than in any one command. So does the one way a command's
configuration (a file, the command line or both) becomes pipeline options: ``resolve_config``
then ``pipeline_options``, shared by ``run``, ``stream``, ``serve`` and ``bench``, so no command
can drop a key another one honours.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from as2d_core.decode.methods import get_method
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.profile import AUTO, NONE
from as2d_core.setup.config import Config, Report, check_file, parse, set_values
from as2d_core.setup.paths import models_dir
from as2d_core.input.pipeline import DetectorOrMaker, Decoder, Pipeline, PipelineOptions
from as2d_core.input.windows import WINDOWS_VAD, SpeechDetector
from as2d_core.input.seek import LONG_FORM_VAD
from as2d_core.setup.catalog import resolve_bridge
from as2d_core.setup.plugins import load_registry, registered_source
from as2d_core.setup.source_spec import SourceSpec
from as2d_core.workers.process_source import ProcessSource

DEFAULT_TARGET = "whisper-base"
# The faster drafter on the user's clock (BENCHMARKS.md section 6); the serial baselines of
# ``as2d bench`` keep the ONNX Runtime one, which can score a prefix.
DEFAULT_SOURCE = "whisper-tiny.en-ct2"


class ConfigProblem(ValueError):
    """A configuration that cannot run here; the message names every problem, one per line."""


def build_part(kind: str, name: str, **options):
    """Instantiate a registered target or source by name, with plugin-specific options."""
    part = load_registry().get(kind, name)
    options.setdefault("models_dir", models_dir())
    return part.factory(options)


def target_thread_counts(decode: DecodeOptions, drafting: bool) -> tuple[int, ...]:
    """The thread counts a target runs at (its ``preload_threads``, built when it loads): alone, and with a drafter
    beside it, fewer while the drafter drafts."""
    return tuple(sorted({decode.target_threads, *([decode.shared_target_threads] if drafting else [])}))


def build_together(make_target: Callable[[], Any], make_source: Callable[[], Any] | None) -> tuple[Any, Any]:
    """The target and the source built at once (``make_source``: None for none). Loading a model is mostly one
    core's work (reading weights, optimizing graphs), so two cores load both in about the time of the slower:
    about 1.5 s instead of 2.4-2.9 s for whisper-base and the CTranslate2 drafter here (BENCHMARKS.md section 29).
    An error of either is raised, the target's first."""
    if make_source is None:
        return make_target(), None
    load_registry()  # once, before two threads ask for it
    with ThreadPoolExecutor(1, thread_name_prefix="as2d-load-source") as pool:
        source = pool.submit(make_source)
        target = make_target()  # on a failure, the pool waits for the source before the error is raised
        return target, source.result()


def build_source(spec: str | SourceSpec, **options):
    """A registered source by name; ``NAME+process`` runs it in its own process (``process_source``)."""
    spec = SourceSpec.parse(spec) if isinstance(spec, str) else spec
    if spec.in_process:
        return build_part("source", spec.name, **options)
    load_registry().get("source", spec.name)  # an unknown name fails here, listing what is installed
    options.setdefault("models_dir", models_dir())
    return ProcessSource(registered_source, spec.name, options, name=str(spec))


def resolve_config(path: Path | None, given: dict[str, Any], defaults: dict[str, Any]) -> tuple[Config, Report | None]:
    """The configuration a command runs with; every key is a dotted configuration key (``"target.model"``).

    With a file: the file with the values ``given`` on the command line on top, checked as
    ``as2d config check --here`` does (its report comes back too). Without one: the command's
    ``defaults`` with ``given`` on top, checked for structure only (parts are looked up when built).
    Raises :class:`ConfigProblem` naming every problem.
    """
    if path is not None:
        report: Report = check_file(path, overrides=given)
        if not report.runnable:
            problems = report.errors + [f"cannot run here: {m}" for m in report.missing]
            raise ConfigProblem("\n".join(f"{path}: {p}" for p in problems))
        config, profile = report.config, report.config.decode.profile
        if profile not in (None, AUTO, NONE) and "profile" not in given and not Path(profile).is_absolute():
            # the file's own device profile is read from the file's folder (a flag's, from the current one)
            config = attrs.evolve(config, decode=attrs.evolve(config.decode, profile=str(Path(path).parent / profile)))
        return config, report
    values = {key: value for key, value in {**defaults, **given}.items() if value is not None}
    config, errors = parse(set_values({}, values), Path("<command line>"))
    if config is None:
        raise ConfigProblem("\n".join(errors))
    return config, None


def pipeline_options(config: Config, **fields) -> PipelineOptions:
    """What ``config`` asks the pipeline for: method, language, task, instruction and every decoding option.

    The only mapping from a configuration to options (``fields``: other ``PipelineOptions``).
    """
    return PipelineOptions(method=config.method, language=config.language, task=config.task,
                           instruction=config.instruction, decode=config.decode, **fields)


def source_spec(config: Config) -> str | None:
    """The name ``build_source`` takes for the configuration's source (``NAME+process`` with ``process = true``)."""
    return None if config.source is None else str(config.source.spec)


def build_parts(config: Config, report: Report | None = None, with_source: bool | None = None):
    """The target and source ``config`` names, on the devices its ``report`` found usable here.

    ``with_source`` defaults to the configuration's own method (a source only for a method that drafts).
    """
    devices = report.devices if report is not None else {}
    drafts = get_method(config.method).needs_source
    make_source = None
    if config.source is not None and (with_source if with_source is not None else drafts):
        make_source = functools.partial(build_source, config.source.spec, backend=config.source.backend,
                                        device=devices.get("source", config.source.device),
                                        threads=config.decode.drafter_threads)
    return build_together(functools.partial(build_part, "target", config.target.model, backend=config.target.backend,
                                            device=devices.get("target", config.target.device),
                                            threads=config.decode.target_threads,
                                            preload_threads=target_thread_counts(config.decode, make_source is not None)),
                          make_source)


def parts_from_config(path: Path, overrides: dict | None = None, with_source: bool | None = None):
    """Validate a task configuration file and build its target and source.

    Returns ``(config, report, target, source)``; raises :class:`ConfigProblem` naming every
    problem. ``with_source`` defaults to the configuration's own method (a source only for a method that drafts).
    """
    config, report = resolve_config(Path(path), overrides or {}, {})
    return (config, report, *build_parts(config, report, with_source))


def default_detector(options: dict | None = None) -> SpeechDetector | None:
    """The first installed voice-activity detector plugin (with ``options``, ``hookspecs.DETECTOR_OPTIONS``), or None."""
    registry = load_registry()
    names = registry.names("detector")
    return registry.get("detector", names[0]).factory(options or {}) if names else None


def windows_detector(options: dict | None = None) -> SpeechDetector | None:
    """The detector of the windows route: faster-whisper's batched pipeline's options (``WINDOWS_VAD``) under
    ``options``."""
    return default_detector({**WINDOWS_VAD, **(options or {})})


def long_form_detector(options: dict | None = None) -> SpeechDetector | None:
    """The detector of the seek route's ``vad_filter``: faster-whisper's defaults (``LONG_FORM_VAD``) under
    ``options``."""
    return default_detector({**LONG_FORM_VAD, **(options or {})})


def build_pipeline(target, source=None, options: PipelineOptions | None = None,
                   detector: DetectorOrMaker = windows_detector, decode: Decoder | None = None,
                   long_form_detector: DetectorOrMaker = long_form_detector) -> Pipeline:
    """A pipeline on loaded models with its parts from the registry: the bridge that carries the source's tokens
    to the target, found once here, so a pair that no bridge connects fails before any audio is read
    (``LookupError``); by default the first installed voice-activity detector, made when a file first needs it,
    with faster-whisper's options for each route (its batched pipeline's, its sequential ``vad_filter``'s)."""
    options = options or PipelineOptions()
    drafts = source is not None and decode is None and get_method(options.method).needs_source
    bridge = resolve_bridge(source, target) if drafts else None
    return Pipeline(target, source, options, detector, decode, bridge, long_form_detector)


def pipeline_from_config(path: str | Path, overrides: dict | None = None, **fields) -> Pipeline:
    """The pipeline a task configuration names (``fields``: other ``PipelineOptions``)."""
    config, _report, target, source = parts_from_config(Path(path), overrides)
    return build_pipeline(target, source, pipeline_options(config, **fields))
