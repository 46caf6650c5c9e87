"""``as2d whisper-decoder-profile``: where an installed Whisper decoder's step spends its time, and what decoding
several windows in one call would save.

    as2d whisper-decoder-profile --model whisper-base                  # ONNX Runtime's time per operator
    as2d whisper-decoder-profile --model whisper-base --batched 1,2,4  # one call over B windows

The first form runs the installed ``decoder.onnx`` on random audio K/V and a cache of ``--past``
positions, at widths 1 and ``--width``, and prints the median step and each operator type's share
from ONNX Runtime's profiler. The second times the installed windows graph (``decoder.windows.onnx``,
what ``--batch-windows`` runs) over B windows of ``--past`` cached positions each against B steps of
the single-window decoder: the measurement behind BENCHMARKS.md section 14's note on batching windows.
"""
from __future__ import annotations

import collections
import json
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from as2d_core.setup.paths import models_dir
from as2d_onnxruntime.sessions import ort_session

from .graph_io import WINDOWS_FILE, audio_feed, audio_input_names


def _median_ms(session, feed: dict, repeats: int = 20) -> float:
    """Median milliseconds of ``session.run`` on ``feed``, after one warm-up run."""
    session.run(None, feed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _inputs(dims: dict, rng, past: int, width: int, windows: int = 1):
    heads = dims["decoder_heads"]
    row = (dims["decoder_layers"], 2, heads, dims["d_model"] // heads)
    cross = rng.normal(size=(windows, row[0], 2, heads, dims["n_audio_ctx"], row[3])).astype(np.float32)
    cache = rng.normal(size=(windows, past, *row)).astype(np.float32)
    tokens = rng.integers(0, dims["n_vocab"], size=(windows, width)).astype(np.int64)
    return tokens, cache, cross


def operator_shares(folder: Path, dims: dict, past: int, width: int, threads: int) -> None:
    rng = np.random.default_rng(0)
    session, _ = ort_session(folder / "decoder.onnx", "cpu", threads)
    for k in (1, width):
        tokens, cache, cross = _inputs(dims, rng, past, k)
        feed = {"tokens": tokens, "past": cache[0], **audio_feed(cross[0])}
        wall = _median_ms(session, feed)
        profiled, _ = ort_session(folder / "decoder.onnx", "cpu", threads, str(Path(tempfile.mkdtemp()) / "step"))
        runs = 30
        for _ in range(runs):
            profiled.run(None, feed)
        events = json.loads(Path(profiled.end_profiling()).read_text())
        by_op: collections.Counter = collections.Counter()
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                by_op[event["args"]["op_name"]] += event["dur"]
        total = sum(by_op.values())
        print(f"\nwidth {k}, {past} cached positions, {threads} threads: step {wall:.2f} ms (median of 20); "
              f"operators {total / runs / 1000:.2f} ms under the profiler")
        for op, micros in by_op.most_common(8):
            print(f"  {op:<22} {micros / runs / 1000:6.2f} ms  {100 * micros / total:5.1f}%")


def batched_windows(folder: Path, dims: dict, sizes: list[int], past: int, width: int, threads: int) -> None:
    """The installed windows graph over B windows against B steps of the single-window decoder."""
    if not (folder / WINDOWS_FILE).is_file():
        raise click.ClickException(f"{folder} has no {WINDOWS_FILE} (a target's folder has it: "
                                   "`as2d models install whisper-base`)")
    single, _ = ort_session(folder / "decoder.onnx", "cpu", threads)
    batched, _ = ort_session(folder / WINDOWS_FILE, "cpu", threads)
    names = audio_input_names(dims["decoder_layers"])
    rng = np.random.default_rng(0)
    print(f"\n{folder.name}: one call over B windows against B single-window steps ({past} cached positions, "
          f"{threads} threads, median of 20)")
    print("| width | B | one call (ms) | B single steps (ms) | per window (ms) | saved |")
    print("|---|---|---|---|---|---|")
    for k in sorted({1, width}):
        tokens, cache, cross = _inputs(dims, rng, past, k, max(sizes))
        step = _median_ms(single, {"tokens": tokens[:1], "past": cache[0], **audio_feed(cross[0])})
        for b in sizes:
            feed = {"tokens": tokens[:b], "cache": np.ascontiguousarray(cache[:b].swapaxes(0, 1)),
                    "lengths": np.full(b, past, np.int64),
                    **{n: np.ascontiguousarray(cross[:b, i // 2, i % 2]) for i, n in enumerate(names)}}
            call = _median_ms(batched, feed)
            print(f"| {k} | {b} | {call:.2f} | {b * step:.2f} | {call / b:.2f} | {1 - call / (b * step):+.0%} |")


@click.command("whisper-decoder-profile")
@click.option("--model", default="whisper-base", show_default=True, help="an installed ONNX Runtime Whisper folder")
@click.option("--past", type=int, default=80, show_default=True, help="cached positions before the step")
@click.option("--width", type=int, default=6, show_default=True, help="the verification width besides 1")
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--batched", default=None, help="comma-separated window counts: time one call of the windows graph "
                                               "(decoder.windows.onnx) over that many windows")
def profile_command(model: str, past: int, width: int, threads: int, batched: str | None) -> None:
    """Time an installed Whisper decoder's step by operator, or one call over several windows against single steps."""
    folder = models_dir() / model
    meta = json.loads((folder / "model.json").read_text())
    if batched:
        batched_windows(folder, meta["dims"], [int(b) for b in batched.split(",")], past, width, threads)
    else:
        operator_shares(folder, meta["dims"], past, width, threads)
