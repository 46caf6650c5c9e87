"""``as2d profile``: measure the configured target and drafters on this machine and write a device profile."""
from __future__ import annotations

import json
import time
from pathlib import Path

import click

import attrs

from as2d_core.decode.options import MAX_BUDGET
from as2d_core.setup.options import bounds

from .inputs import DEFAULT_AUDIO, calibration_audio, fail, load_config, numbers
from .measurement import LENGTHS, Measurement

_DEFAULT = {field.name: field.default for field in attrs.fields(Measurement)}  # each flag's default is the protocol's


@click.command("profile")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Task configuration to profile (target, drafter, threads, niceness); default: as2d run's "
                   "target and drafter.")
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Profile file to write (.json or .toml is read back; JSON is written); default: this machine's "
                   "profile of the pair in the profiles folder ($AS2D_PROFILES_DIR, else ~/.local/share/as2d/"
                   "profiles), which as2d run, as2d serve and WhisperModel then read by themselves (profile auto).")
@click.option("--audio", "audio_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Calibration speech (repeatable; the files are joined), in a language the drafters draft; "
                   "default: the bundled examples/ljspeech_en_w00.wav.")
@click.option("--kmax", type=click.IntRange(1, MAX_BUDGET + 1), default=_DEFAULT["kmax"], show_default=True,
              help="Largest physical width K (a call checks at most the budget's proposals and the root).")
@click.option("--offsets", default=",".join(map(str, _DEFAULT["offsets"])), show_default=True,
              help="Target-prefix offsets (tokens).")
@click.option("--repeats", type=click.IntRange(1), default=_DEFAULT["repeats"], show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=_DEFAULT["warmup"], show_default=True)
@click.option("--decodes", type=click.IntRange(1), default=_DEFAULT["decodes"], show_default=True,
              help="Real decodes per method for loop costs.")
@click.option("--nice", "niceness", default=None,
              help="Drafter niceness values to measure beside the target (comma-separated); default: the "
                   "configuration's nice and guess_nice.")
@click.option("--lengths", default=None,
              help="Audio lengths (s) at which the preparation and the drafters' jobs are measured; default: "
                   f"{LENGTHS[0]:g} to {LENGTHS[-1]:g} s in {len(LENGTHS)} steps.")
@click.option("--job-repeats", type=click.IntRange(1), default=_DEFAULT["job_repeats"], show_default=True,
              help="Target preparations and drafter jobs per audio length.")
@click.option("--rounds", type=click.IntRange(1), default=_DEFAULT["rounds"], show_default=True,
              help="Rounds of the contention measurements (the target and each drafter alone and side by side), "
                   "per drafter and niceness.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="R(K) figure (default: OUT with .png).")
@click.option("--sources", "other_names", default=None,
              help="Other drafters to price too (comma-separated), for replay and select across sources.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def profile(config_path, out_path, audio_paths, kmax, offsets, repeats, warmup, decodes, niceness, lengths,
            job_repeats, rounds, plot_path, other_names, quiet):
    """Measure the configured target and drafters on this machine and write a device profile."""
    from as2d_core.decode.profile import machine_profile_file
    from as2d_core.setup.build import build_source
    from as2d_core.setup.paths import models_dir
    from as2d_core.setup.plugins import UnknownPart
    from .plots import plot_r_of_k
    from .profile import build_profile
    from .stats import ProfileError

    nice = numbers(niceness, "--nice") if niceness else None
    low, high = bounds("drafter_nice")
    if nice is not None and (not nice or any(not low <= n <= high for n in nice)):
        fail(f"--nice values must be between {low} and {high}, got {niceness}")
    grid = numbers(lengths, "--lengths", float) if lengths else list(LENGTHS)
    if not grid or min(grid) <= 0:
        fail(f"--lengths must be positive seconds, got {lengths}")
    audio = calibration_audio(audio_paths)
    config, target, source = load_config(config_path)
    options = config.decode
    nice = nice or sorted({options.drafter_nice, options.guess_nice})
    sources = {} if source is None else {source.name: source}
    try:
        for name in (n.strip() for n in (other_names or "").split(",")):
            if name and name not in sources:
                sources[name] = build_source(name)
    except UnknownPart as exc:
        fail(str(exc))

    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"[profile {time.perf_counter() - started:4.0f} s] {message}", err=True)

    measurement = Measurement(target, sources, audio, config.language, options, kmax=kmax, offsets=numbers(offsets, "--offsets"),
                              repeats=repeats, warmup=warmup, decodes=decodes, niceness=nice, lengths=sorted(grid),
                              job_repeats=job_repeats, rounds=rounds, say=say)
    try:
        data = build_profile(config, measurement, models_dir=models_dir())
    except ProfileError as exc:
        fail(str(exc))
    # what it was calibrated on: whether drafting pays depends on how well the drafter guesses this speech
    data["protocol"]["audio"] = [p.name for p in audio_paths or (DEFAULT_AUDIO,)]
    out_path = out_path or machine_profile_file(data["machine"]["kind"], target.name, source and source.name)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1))
    plot_path = plot_path or out_path.with_suffix(".png")
    plot_r_of_k({data["name"]: data}, plot_path)
    click.echo("K  alone_ms  shared_ms  R(K)%")
    for k, s in data["verify_s"]["alone"].items():
        shared = data["verify_s"].get("shared", {}).get(k)
        click.echo(f"{k:>2} {1000 * s['median']:8.2f} {1000 * shared['median'] if shared else float('nan'):9.2f} "
                   f"{data['r_k_pct'][k]['r_pct']:6.1f}")
    prepare = data["prepare_s"]["alone"]
    click.echo(f"target preparation alone: {1000 * min(v['median'] for v in prepare.values()):.0f}-"
               f"{1000 * max(v['median'] for v in prepare.values()):.0f} ms")
    for name, d in data.get("drafters", {}).items():
        fit = d["piece_s"]
        click.echo(f"drafter {name}: piece {1000 * fit['first']:.1f} ms + {1000 * fit['per_token']:.2f} ms per token"
                   f" (later pieces {1000 * fit['next']:.1f} ms +), encoder "
                   f"{1000 * min(v['median'] for v in d['prepare_s'].values()):.0f}-"
                   f"{1000 * max(v['median'] for v in d['prepare_s'].values()):.0f} ms")
        for n, c in d["niceness"].items():
            click.echo(f"  niceness {n}: target preparation x{c['target_slowdown']['prepare']:.2f} beside it; it runs "
                       f"x{c['drafter_slowdown']['prepare']:.2f} beside the preparation, "
                       f"x{c['drafter_slowdown']['verify']:.2f} beside verification")
    batch = data.get("batch_s") or {}
    alone = batch.get("alone_e2e_s")
    waves = {"1": alone, **batch.get("waves_e2e_s", {})} if alone else batch.get("waves_e2e_s", {})
    if waves:  # what prices the waves and the server's rule (``scheduler.timed_waves``)
        click.echo("rows at once, as2d / target-only from arrival to last token: " + ", ".join(
            f"{rows}: {clock['as2d']:.2f} / {clock['target-only']:.2f} s" for rows, clock in waves.items())
                   + f"; drafting pays up to {batch.get('speculate_rows')} row(s)")
    click.echo(f"wrote {out_path} and {plot_path} in {data['duration_s']:.0f} s")
