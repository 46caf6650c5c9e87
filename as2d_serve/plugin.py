"""``as2d serve``, attached to the ``as2d`` command through the plugin hook (the core never imports it)."""
from __future__ import annotations

import os
import sys

import click

from as2d_core.cli.shared import MODEL_KEYS, MethodChoice, command_config, given, model_flags
from as2d_core.decode.faults import FAULTS
from as2d_core.setup.hookspecs import hookimpl
from as2d_core.setup.options import SERVE

API_KEY_ENV = "AS2D_API_KEY"


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; only this machine by default.")
@click.option("--port", type=int, default=8000, show_default=True)
@model_flags
@click.option("--method", type=MethodChoice(), default="as2d", show_default=True,
              help="The requests' default method (default with --config: its method).")
@click.option("--decodes", type=int, default=None,
              help="Transcriptions at a time, each with its own copy of the models [default: one per two cores].")
@SERVE["slots"].option
@SERVE["speculate_rows"].option
@SERVE["queue_size"].option
@SERVE["max_upload_mb"].option
@SERVE["deadline_s"].option
@SERVE["grace_s"].option
@click.option("--api-key", default=None, help=f"Require 'Authorization: Bearer KEY' (or set ${API_KEY_ENV}).")
@click.option("--fault", "faults", type=click.Choice(FAULTS), multiple=True,
              help="Inject this drafter fault (repeat for several, used in turn); for tests and soaks.")
@SERVE["fault_every"].option
@SERVE["stall_s"].option
@click.option("--log-level", default="warning", show_default=True)
@click.pass_context
def serve(ctx, host, port, method, decodes, slots, speculate_rows, queue_size, max_upload_mb, deadline_s, grace_s, api_key, faults,
          fault_every, stall_s, log_level, **model_options):
    """Serve OpenAI-compatible transcriptions (POST /v1/audio/transcriptions) with the models kept loaded.

    Without --timestamps, srt, vtt and verbose_json answers are in Whisper's timestamp segments (as OpenAI's
    and `as2d run --format srt` are), json and text answers the text only; --timestamps none gives one segment
    per window in all of them. A request must name a model: whisper-1, the target's name or faster-whisper's (base).
    """
    from as2d_core.decode.profile import AUTO, profile_path
    from as2d_core.setup.plugins import UnknownPart

    from .admission import Limits
    from .app import create_app
    from .server import serve as serve_app
    from .service import ServeSettings, TranscriptionService

    if decodes is None:  # with --slots the requests share one copy of the models
        decodes = 1 if slots > 1 else max(1, (os.cpu_count() or 2) // 2)
    if decodes < 1:
        _fail("--decodes must be at least 1")
    config, report = command_config(ctx, MODEL_KEYS, method if given(ctx, "method") else None)
    named = config.decode.profile  # --profile, the file's profile, or auto: this machine's, if there is one
    profile = profile_path(named, config.target.model, None if config.source is None else config.source.name)
    if profile is not None and not given(ctx, "speculate_rows"):
        rows = _profiled_rows(profile)
        if rows is None and named != AUTO:
            _fail(f"{profile} has no batch costs (batch_s): measure them with `as2d profile` on this target")
        speculate_rows = speculate_rows if rows is None else rows
    try:
        settings = ServeSettings(config, report, decodes=decodes, slots=slots, speculate_rows=speculate_rows,
                                 faults=tuple(faults), fault_every=fault_every, stall_s=stall_s)
        service = TranscriptionService(settings)
    except (UnknownPart, ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    limits = Limits(queue_size=queue_size, max_upload_bytes=int(max_upload_mb * 1024 * 1024), deadline_s=deadline_s,
                    api_key=api_key or os.environ.get(API_KEY_ENV) or None, grace_s=grace_s)
    click.echo(f"as2d serve: {service.target_name} with {service.default_source or 'no drafter'} "
               f"on http://{host}:{port} ({service.concurrency} decode(s) at a time"
               f"{' through one scheduler' if slots > 1 else ''}, {queue_size} waiting)", err=True)
    serve_app(create_app(service, limits), host, port, log_level)


def _profiled_rows(path: str) -> int | None:
    """The batch size up to which drafting pays, by the profile's measured batch costs (the core's one loader);
    None where it has none."""
    from as2d_core.decode.profile import NotAProfile, read_profile
    from as2d_core.decode.scheduler import speculate_rows_from

    try:
        return speculate_rows_from(read_profile(path))
    except NotAProfile as exc:
        _fail(str(exc))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _fail(f"{path}: its batch costs (batch_s) cannot be read: {exc!r}")


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@hookimpl
def register_commands(cli):
    cli.add_command(serve)
