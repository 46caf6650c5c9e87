"""``as2d serve``, attached to the ``as2d`` command through the plugin hook (the core never imports it)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from as2d_core.build import DEFAULT_SOURCE, DEFAULT_TARGET
from as2d_core.engine import METHODS, DecodeOptions
from as2d_core.faults import FAULTS
from as2d_core.hookspecs import hookimpl

API_KEY_ENV = "AS2D_API_KEY"


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Per-task TOML file (target, source, method, budget); replaces --target/--source/--method.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; only this machine by default.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True)
@click.option("--source", "source_name", default=DEFAULT_SOURCE, show_default=True,
              help="Default drafter; NAME+process runs it in its own process.")
@click.option("--method", type=click.Choice(METHODS), default="as2d", show_default=True)
@click.option("--budget", type=int, default=7, show_default=True)
@click.option("--decodes", type=int, default=None,
              help="Transcriptions at a time, each with its own copy of the models [default: one per two cores].")
@click.option("--queue-size", type=int, default=8, show_default=True, help="Requests that may wait; more get 429.")
@click.option("--max-upload-mb", type=float, default=25.0, show_default=True, help="Larger uploads get 413.")
@click.option("--deadline", "deadline_s", type=float, default=120.0, show_default=True,
              help="Seconds from arrival to answer; later ones get 504 and their decoding is stopped.")
@click.option("--api-key", default=None, help=f"Require 'Authorization: Bearer KEY' (or set ${API_KEY_ENV}).")
@click.option("--fault", "faults", type=click.Choice(FAULTS), multiple=True,
              help="Inject this drafter fault (repeat for several, used in turn); for tests and soaks.")
@click.option("--fault-every", type=int, default=1, show_default=True, help="Inject a fault on every n-th request.")
@click.option("--stall-s", type=float, default=20.0, show_default=True, help="How long the 'stall' fault blocks.")
@click.option("--log-level", default="warning", show_default=True)
def serve(config_path, host, port, target_name, source_name, method, budget, decodes, queue_size, max_upload_mb,
          deadline_s, api_key, faults, fault_every, stall_s, log_level):
    """Serve OpenAI-compatible transcriptions (POST /v1/audio/transcriptions) with the models kept loaded."""
    import uvicorn

    from as2d_core.plugins import UnknownPart

    from .app import Limits, create_app
    from .service import ServeSettings, TranscriptionService

    decodes = decodes if decodes is not None else max(1, (os.cpu_count() or 2) // 2)
    for name, value in (("--decodes", decodes), ("--fault-every", fault_every), ("--queue-size", queue_size + 1)):
        if value < 1:
            _fail(f"{name} must be at least {1 if name != '--queue-size' else 0}")
    try:
        settings = ServeSettings(target=target_name, source=source_name, method=method, config_path=config_path,
                                 options=DecodeOptions(budget=budget), decodes=decodes, faults=tuple(faults),
                                 fault_every=fault_every, stall_s=stall_s)
        service = TranscriptionService(settings)
    except (UnknownPart, ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    limits = Limits(queue_size=queue_size, max_upload_bytes=int(max_upload_mb * 1024 * 1024), deadline_s=deadline_s,
                    api_key=api_key or os.environ.get(API_KEY_ENV) or None)
    click.echo(f"as2d serve: {service.target_name} with {service.default_source or 'no drafter'} "
               f"on http://{host}:{port} ({decodes} decode(s) at a time, {queue_size} waiting)", err=True)
    uvicorn.run(create_app(service, limits), host=host, port=port, log_level=log_level)


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@hookimpl
def register_commands(cli):
    cli.add_command(serve)
