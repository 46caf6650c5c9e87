"""What the commands that decode share: the error exit, the model flags, one configuration from ``--config`` and flags.

``run``, ``stream``, ``serve`` and ``bench`` all turn their ``--config`` file and flags into one checked
configuration with :func:`command_config`, and that into pipeline options with ``build.pipeline_options``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from as2d_core.setup.catalog import check_pair
from as2d_core.setup.build import (DEFAULT_SOURCE, DEFAULT_TARGET, build_parts, build_pipeline, pipeline_options,
                                   resolve_config)
from as2d_core.setup.config import Config, Report
from as2d_core.contracts import TASKS
from as2d_core.decode.methods import get_method, method_names
from as2d_core.decode.profile import cached_profile, profile_path
from as2d_core.setup.options import config_keys, option_flags
from as2d_core.setup.plugins import UnknownPart


def fail(message: str) -> None:
    """A one-line error and exit status 2: what every command does with bad input."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


# command-line parameter of ``model_flags`` -> the dotted configuration key it sets (over --config's value)
MODEL_KEYS = {
    "language": "language",
    "task": "task",
    "target_name": "target.model",
    "source_name": "source.name",
    "device": "target.device",
    **config_keys(),
}


def config_option(command):
    """--config: a per-task TOML file, under the flags given beside it."""
    return click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help="Per-task TOML file; options given on the command line override it.")(command)


def model_flags(command):
    """--config, --language, --task, --target, --source, --device and every decoding option."""
    for decorator in reversed((
        config_option,
        click.option("--language", default=None, help="Language code; without it the target detects the language."),
        click.option("--task", type=click.Choice(TASKS), default="asr", show_default=True,
                     help="asr: transcribe; translate: into English (Whisper's translate task); qa: answer the "
                          "instruction. A drafter that cannot draft the task leaves the target alone, and says so."),
        click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True),
        click.option("--source", "source_name", default=DEFAULT_SOURCE, show_default=True,
                     help="Drafter source; NAME+process runs it in its own process (for targets that hold the GIL)."),
        click.option("--device", default="cpu", show_default=True, help="Device for the target backend (cpu, nnapi)."),
        option_flags,
    )):
        command = decorator(command)
    return command


class MethodChoice(click.Choice):
    """The registered decoding methods, read when a command line is parsed, not when the command is
    defined: plugins may add methods, and ``as2d serve`` is defined while the plugins are still loading."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return method_names()

    @choices.setter
    def choices(self, value) -> None:  # click's own __init__ sets it; the registry decides
        pass


def given(ctx: click.Context, name: str) -> bool:
    """Whether parameter ``name`` was given on the command line (not left at its default)."""
    return ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE


def command_config(ctx: click.Context, keys: dict[str, str], method: str | None = None) -> tuple[Config, Report | None]:
    """The command's configuration: ``--config`` with the flags given on top, or the flags alone.

    ``keys``: the command's parameters -> dotted configuration keys; ``method``: one asked for on
    the command line (None: the configuration's own). A problem ends the command in one line.
    """
    params = ctx.params
    on_line = {key: params[name] for name, key in keys.items() if given(ctx, name)}
    if method is not None:
        on_line["method"] = method
    try:
        defaults = {key: params[name] for name, key in keys.items()}
        config, report = resolve_config(params["config_path"], on_line, defaults)
    except ValueError as exc:
        fail(str(exc))
    for warning in report.warnings if report is not None else ():
        click.echo(f"warning: {report.path}: {warning}", err=True)
    return config, report


def pipeline_from_flags(ctx: click.Context, method: str, method_given: bool):
    """The resident models a command decodes with: from ``--config`` (flags on top) or from the flags alone.

    ``method_given``: ``method`` overrides the configuration's own (it was asked for explicitly).
    """
    config, report = command_config(ctx, MODEL_KEYS, method if method_given else None)
    try:
        if config.source is not None and get_method(config.method).needs_source:
            check_pair(config.source.name, config.target.model)  # a pair that can never work, before loading
        options = pipeline_options(config)
        source = None if config.source is None else config.source.name
        profile = profile_path(options.decode.profile, config.target.model, source)
        if profile is not None:  # a file that is no device profile is refused before the models load
            cached_profile(profile)
        return build_pipeline(*build_parts(config, report), options), report
    except (UnknownPart, ValueError, FileNotFoundError, RuntimeError) as exc:
        fail(str(exc))
