"""Two Whisper model folders' graphs on the same inputs: are their outputs bit for bit the same, and which is faster.

For a change of a conversion recipe that should keep the numbers (BENCHMARKS.md section 35): the encoder on a
clip (the quick start's), and one 5-beam step of the beams graph (or the windows graph where a folder has none) at
60 positions on seeded random cache and audio K/V; two folders of different model formats are refused. The two
folders' sessions run alternately in one process, made as the runtime makes them (``as2d_onnxruntime.sessions``:
workers not spinning, or a spinning pool would steal the cores from the session run after it); medians per graph.

    .venv/bin/python -m as2d_whisper.convert.compare_graphs OLD_FOLDER ~/.local/share/as2d/models/whisper-base-int8
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from as2d_core.input.audio import load_audio
from as2d_onnxruntime.sessions import ort_session

from ..features import encoder_input
from ..graph_io import BEAMS_FILE, OWN, PROMPT, WINDOWS_FILE, kv_feed


def step_feed(meta: dict, inputs: list[str], beams: int = 5, positions: int = 60) -> dict[str, np.ndarray]:
    """One beam step's inputs for a graph with these ``inputs``: each row's next token after ``positions`` cached
    ones (on the beams graph two thirds of them the prompt every row shares, the rest each row's own), one window's
    audio K/V."""
    dims, rng = meta["dims"], np.random.default_rng(0)
    layers, heads = dims["decoder_layers"], dims["decoder_heads"]
    head_dim, frames = dims["d_model"] // heads, dims["n_audio_ctx"]

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.5

    feed = {"tokens": rng.integers(0, 50_000, (beams, 1)).astype(np.int64)}
    if "cache" in inputs:  # the windows graph's contract
        feed.update(cache=normal(positions, beams, layers, 2, heads, head_dim),
                    lengths=np.full(beams, positions, np.int64))
    else:
        own = positions // 3
        feed.update(lengths=np.full(beams, own, np.int64),
                    **kv_feed(normal(layers, 2, own, beams, heads, head_dim), OWN),
                    **kv_feed(normal(layers, 2, 1, heads, positions - own, head_dim), PROMPT))
    feed.update(kv_feed(normal(layers, 2, 1, heads, frames, head_dim)))
    return feed


def clip_feed(clip: Path) -> dict[str, np.ndarray]:
    return {"mel": encoder_input(load_audio(clip))}


def compare(old: Path, new: Path, graph: str, feed, rounds: int, threads: int) -> dict:
    """``feed``: the inputs, or what makes them from the graph's input names (``step_feed``)."""
    sessions = {name: ort_session(folder / graph, "cpu", threads)[0] for name, folder in (("old", old), ("new", new))}
    inputs = {name: sorted(i.name for i in s.get_inputs()) for name, s in sessions.items()}
    if inputs["old"] != inputs["new"]:
        raise SystemExit(f"{graph} takes other inputs in {old} than in {new}: the folders are of two model formats")
    if callable(feed):
        feed = feed(inputs["new"])
    times: dict[str, list[float]] = {"old": [], "new": []}
    outputs = {}
    for _ in range(rounds):
        for name, s in sessions.items():
            started = time.perf_counter()
            outputs[name] = s.run(None, feed)
            times[name].append(time.perf_counter() - started)
    same = all(np.array_equal(a, b) for a, b in zip(outputs["old"], outputs["new"]))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs["old"], outputs["new"]))
    old_ms, new_ms = (float(np.median(times[k])) * 1e3 for k in ("old", "new"))
    return {"graph": graph, "bitwise_equal": same, "max_abs_diff": diff, "old_ms": round(old_ms, 2),
            "new_ms": round(new_ms, 2), "old_over_new": round(old_ms / new_ms, 3), "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=40, help="calls of each step graph (the encoder: a fifth)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clip", type=Path, default=Path("examples/ljspeech_en_w00.wav"),
                        help="the encoder's audio (default: the quick start's clip, from the repository's root)")
    args = parser.parse_args()
    old, new = args.old.expanduser(), args.new.expanduser()
    meta = json.loads((new / "model.json").read_text())
    step = BEAMS_FILE if (old / BEAMS_FILE).is_file() and (new / BEAMS_FILE).is_file() else WINDOWS_FILE
    for graph, feed, rounds in (("encoder.onnx", clip_feed(args.clip), max(3, args.rounds // 5)),
                                (step, lambda inputs: step_feed(meta, inputs), args.rounds)):
        print(json.dumps(compare(old, new, graph, feed, rounds, args.threads)))


if __name__ == "__main__":
    main()
