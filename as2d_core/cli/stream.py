"""``as2d stream``: a file fed as a sustained stream of blocks (Appendix D.6.2), with per-block timings.

Each block is decoded over its context view, so a later block of the same view may say its seconds
differently; only the view's last block (``BlockResult.final``) gives text that no later block revises.
The text printed on stdout is that committed text only, view by view, as the server's streamed deltas
are never revised; each block's timings go to stderr, and the run ends with its whole transcript.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import attrs
import click

from as2d_core.input.audio import AudioError, read_audio
from as2d_core.cli.shared import fail, given, model_flags, pipeline_from_flags
from as2d_core.decode.methods import get_method, method_names
from as2d_core.input.stream import PACES
from as2d_core.setup.options import STREAM

TRAILING_BLOCKS = 15  # Figure 9 smooths throughput, prefill and RTF over at most 15 blocks


def _methods(value: str) -> list[str]:
    methods = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in methods if m not in method_names()]
    if not methods or unknown:
        raise click.BadParameter(f"choose from {', '.join(method_names())} (comma-separated), got {value!r}")
    return methods


@click.command()
@click.argument("audio", type=click.Path(dir_okay=False, path_type=Path))
@STREAM["block_s"].option
@STREAM["context_s"].option
@click.option("--pace", type=click.Choice(PACES), default="realtime", show_default=True,
              help="realtime: each block arrives at its real time; fast: back to back.")
@click.option("--method", "methods", default="as2d", show_default=True,
              help="as2d, target-only or another registered method, or several comma-separated (the same stream "
                   "once per method); "
                   "default with --config: its method.")
@model_flags
@click.option("--check", is_flag=True, help="Also decode every block's view target-only (after the stream) and report exact.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per block, then one summary line per method.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a Figure-9-style plot (panels against arrival time) to this file (needs matplotlib).")
@click.pass_context
def stream(ctx, audio, block_s, context_s, pace, methods, check, as_json, plot_path, **model_options):
    """Feed AUDIO as a sustained stream of blocks; print committed text as it is final, the run's timings and
    the transcript.

    Text is printed only once no later block can revise it (the last block of each context view); each
    block's lag and queue wait go to stderr. --json prints every block (its text, and whether it is final).
    """
    from as2d_core.input.pipeline import Pipeline

    try:
        methods = _methods(methods)
        decoded = read_audio(audio)
    except (click.BadParameter, AudioError) as exc:
        fail(str(exc))
    for note in decoded.info.warnings:
        click.echo(f"warning: {note}", err=True)
    method_given = given(ctx, "methods")
    drafting = [m for m in methods if get_method(m).needs_source]  # the pipeline builds a source for these
    base, _ = pipeline_from_flags(ctx, drafting[0] if drafting else "target-only", method_given)
    methods = methods if method_given else [base.options.method]  # else the configuration's method
    summaries, sessions = [], {}
    for method in methods:
        drafts = get_method(method).needs_source
        pipeline = Pipeline(base.target, base.source if drafts else None, attrs.evolve(base.options, method=method),
                            bridge=base.bridge if drafts else None)
        try:
            session = pipeline.stream(block_s, context_s, check)
            sessions[method] = session
            for block in session.replay(decoded.samples, pace):
                if not check:
                    _emit(block, method, as_json)
        except ValueError as exc:
            fail(str(exc))
        if check:
            for block in session.blocks:
                _emit(block, method, as_json)
        summary = session.summary()
        summaries.append(summary)
        click.echo(json.dumps(summary, ensure_ascii=False) if as_json else _summary_text(summary, pace))
        if not as_json:
            click.echo(f"[{method}] transcript: {session.text}")
    if plot_path is not None:
        try:
            plot(sessions, plot_path, block_s)
        except ImportError:
            fail("--plot needs matplotlib (pip install matplotlib)")
        click.echo(f"plot written to {plot_path}", err=True)
    if any(s.get("exact") is False for s in summaries):
        click.echo("MISMATCH: some block differs from target-only greedy decoding of the same view", err=True)
        sys.exit(1)


def _emit(block, method: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"method": method, **block.as_dict()}, ensure_ascii=False))
        return
    mark = "" if block.exact is None else (" exact" if block.exact else " NOT EXACT")
    span = f"[{method} {block.view_start_s:6.1f}-{block.end_s:6.1f} s]"
    click.echo(f"{span} block {block.index}: lag {block.lag_s:5.2f} s wait {block.queue_wait_s:4.2f} s{mark}"
               + ("" if block.final else " (its view goes on: text held)"), err=True)
    if block.final and block.text:  # committed: the view's last block, which nothing after it revises
        click.echo(f"{span} {block.text}")


def _summary_text(s: dict, pace: str) -> str:
    parts = [
        f"[{s['method']} {pace}] {s['blocks']} blocks, {s['audio_s']:.1f} s of audio",
        f"active RTF {s['active_rtf']:.2f}, resource RTF {s['resource_rtf']:.2f}",
        f"decode {s['decode_tps']:.1f} tok/s",
        f"lag p50 {s['p50_lag_s']:.2f} s, p95 {s['p95_lag_s']:.2f} s, max queue wait {s['max_queue_wait_s']:.2f} s",
    ]
    if "exact" in s:
        parts.append("exact" if s["exact"] else "NOT EXACT")
    if s["drafter_failures"]:
        parts.append(f"drafter failed in {s['drafter_failures']} block(s); output unaffected")
    return " | ".join(parts)


def _trailing(values: list[float], weights: list[float] | None = None) -> list[float]:
    """Mean over the last ``TRAILING_BLOCKS`` blocks (weighted: sum(values) / sum(weights))."""
    out = []
    for i in range(len(values)):
        lo = max(0, i + 1 - TRAILING_BLOCKS)
        window = values[lo : i + 1]
        if weights is None:
            out.append(sum(window) / len(window))
        else:
            total = sum(weights[lo : i + 1])
            out.append(sum(window) / total if total > 0 else 0.0)
    return out


def plot(sessions: dict, path: Path, block_s: float) -> None:
    """Panels against input-arrival time, one line per method, as in the paper's Figure 9."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(5, 1, figsize=(8, 12), sharex=True)
    for method, session in sessions.items():
        blocks = session.blocks
        arrival = [b.end_s for b in blocks]
        tokens = [len(b.result.tokens) for b in blocks]
        axes[0].plot(arrival, _trailing(tokens, [b.result.decode_s for b in blocks]), label=method)
        axes[1].plot(arrival, _trailing([b.result.prepare_s for b in blocks]), label=method)
        axes[2].plot(arrival, _trailing([b.service_s for b in blocks], [block_s] * len(blocks)), label=method)
        axes[3].plot(arrival, [b.lag_s for b in blocks], ".-", label=method)
        axes[4].plot(arrival, [b.queue_wait_s for b in blocks], ".-", label=method)
    axes[2].axhline(1.0, linestyle=":", color="black")
    titles = ["(a) decode throughput (tokens/s, trailing)", "(b) encoder + prefill (s, trailing)",
              "(c) processing RTF (trailing)", "(d) completion lag (s)", "(e) queue wait (s)"]
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[-1].set_xlabel("input arrival time (s)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
