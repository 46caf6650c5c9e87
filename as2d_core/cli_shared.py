"""What ``as2d run`` and ``as2d stream`` share: the error exit, the model flags and building the pipeline."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .build import DEFAULT_SOURCE, DEFAULT_TARGET, build_part, build_source, parts_from_config
from .options import config_keys, option_flags, options_from_params
from .pipeline import Pipeline, PipelineOptions
from .plugins import UnknownPart


def fail(message: str) -> None:
    """A one-line error and exit status 2: what every command does with bad input."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


# command-line parameter -> the dotted configuration key it overrides when given with --config
CONFIG_OVERRIDES = {
    "language": "language",
    "target_name": "target.model",
    "source_name": "source.name",
    "device": "target.device",
    **config_keys(),
}


def model_flags(command):
    """--config, --language, --target, --source, --device and every decoding option."""
    for decorator in reversed((
        click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Per-task TOML file; options given on the command line override it."),
        click.option("--language", default=None, help="Language code; without it the target detects the language."),
        click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True),
        click.option("--source", "source_name", default=DEFAULT_SOURCE, show_default=True,
                     help="Drafter source; NAME+process runs it in its own process (for targets that hold the GIL)."),
        click.option("--device", default="cpu", show_default=True, help="Device for the target backend (cpu, nnapi)."),
        option_flags,
    )):
        command = decorator(command)
    return command


def pipeline_from_flags(ctx: click.Context, method: str, method_given: bool):
    """The resident models a command decodes with: from ``--config`` (flags on top) or from the flags alone.

    ``method_given``: ``method`` overrides the configuration's own (it was asked for explicitly).
    """
    params = ctx.params
    report = None
    try:
        if params["config_path"] is not None:
            overrides = {key: params[name] for name, key in CONFIG_OVERRIDES.items()
                         if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE}
            if method_given:
                overrides["method"] = method
            config, report, target, source = parts_from_config(params["config_path"], overrides)
            for warning in report.warnings:
                click.echo(f"warning: {params['config_path']}: {warning}", err=True)
            options = PipelineOptions(method=config.method, language=config.language, task=config.task,
                                      instruction=config.instruction, decode=config.decode_options())
        else:
            options = PipelineOptions(method=method, language=params["language"], decode=options_from_params(params))
            target = build_part("target", params["target_name"], device=params["device"])
            source = build_source(params["source_name"]) if method == "as2d" else None
        return Pipeline(target, source, options), report
    except (UnknownPart, ValueError, FileNotFoundError, RuntimeError) as exc:
        fail(str(exc))
