"""What the tuning commands share: refusing bad input in one line, the configuration and calibration audio
they run on, number lists, and where their pricing jobs run (here or on Ray)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import click


def fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def ray_option(command):
    return click.option(
        "--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
        help="Price the source x budget sweep as Ray tasks: on the cluster at ADDRESS, else the one this machine "
             "belongs to, else a new local one (pip install 'as2d[ray]'). Same output as without.")(command)


@contextmanager
def job_mapper(ray_address: str | None):
    """How independent pricing jobs run: here, or (``--ray``) as tasks on a Ray cluster, joined for the command."""
    from .tasks import local_map, ray_map

    if ray_address is None:
        yield local_map
        return
    from as2d_bench.distributed import RayUnavailable, ray_cluster

    try:
        with ray_cluster(ray_address):
            yield ray_map
    except RayUnavailable as exc:
        fail(str(exc))


def load_config(path: Path | None):
    """Validate a task configuration and build its target and source, as ``as2d run --config`` does;
    without one, ``as2d run``'s default target and drafter."""
    from as2d_core.setup.build import ConfigProblem, build_parts, parts_from_config
    from as2d_core.setup.plugins import UnknownPart

    try:
        if path is None:
            config = run_default_config()
            return (config, *build_parts(config, None, with_source=True))
        config, _, target, source = parts_from_config(path, with_source=True)
    except (ConfigProblem, UnknownPart) as exc:
        fail(str(exc))
    return config, target, source


def run_default_config():
    """``as2d run``'s configuration without a file: its default target and drafter."""
    from as2d_core.setup.build import DEFAULT_SOURCE, DEFAULT_TARGET, resolve_config

    return resolve_config(None, {}, {"target.model": DEFAULT_TARGET, "source.name": DEFAULT_SOURCE})[0]


DEFAULT_AUDIO = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"


def calibration_audio(paths: tuple[Path, ...]):
    """The calibration speech: the files given, joined, or the bundled clip."""
    import numpy as np

    from as2d_core.input.audio import AudioError, load_audio

    if not paths:
        if not DEFAULT_AUDIO.is_file():
            fail(f"no calibration audio: {DEFAULT_AUDIO} is not here; pass --audio with speech the drafter drafts")
        paths = (DEFAULT_AUDIO,)
    try:
        return np.concatenate([load_audio(p) for p in paths])
    except AudioError as exc:
        fail(str(exc))


def numbers(text: str, what: str, kind=int) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"{what} must be comma-separated numbers, got {text!r}")
