"""Whole-file wall clock: as2d, target-only, serial SD and faster-whisper fp32/int8 on one long recording.

Every model is loaded (and warmed on the first 30 s) before its clock starts; each clock covers
the whole file from decoded samples to text: voice-activity detection, every window's encoder,
prefill and decoding. as2d, target-only and sd-kN decode the same Silero VAD windows through
``as2d_core.input.pipeline.Pipeline``; their per-window tokens are compared with target-only's (exact).
faster-whisper runs ``transcribe(vad_filter=True, without_timestamps=True, beam_size=1)`` with
its own VAD. One JSON line per method, then a Markdown table.

``--stream`` feeds the file instead as a sustained stream (``as2d stream``'s blocks, views and
pacing) once per method, serial SD included, and prints each method's stream summary.

    .venv/bin/python scripts/make_long_audio.py --seconds 600 --out /tmp/long_en_600s.wav
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_en_600s.wav \\
        --methods target-only,sd-k5,as2d,fw-fp32,fw-int8 --out /tmp/long_en_600s.bench.jsonl
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_en_600s.wav --stream --pace realtime \\
        --methods target-only,sd-k5,as2d --out /tmp/long_en_600s.stream.jsonl
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from as2d_core.decode.methods import get_method
from as2d_core.input.audio import read_audio
from as2d_core.setup.build import build_part, build_source
from as2d_core.setup.options import DecodeOptions
from as2d_core.input.pipeline import Pipeline, PipelineOptions

SAMPLE_RATE = 16_000
FW_PRECISIONS = {"fw-fp32": "float32", "fw-int8": "int8"}


def as2d_pipeline(method: str, target, source, options: PipelineOptions) -> Pipeline:
    return Pipeline(target, source if get_method(method).needs_source else None, PipelineOptions(
        method=method, language=options.language, decode=options.decode))


def run_pipeline(method: str, pipeline: Pipeline, samples: np.ndarray, reference: list | None) -> dict:
    pipeline.transcribe(samples[: 30 * SAMPLE_RATE], request_id="warm")
    start = time.perf_counter()
    transcript = pipeline.transcribe(samples, request_id=method)
    wall = time.perf_counter() - start
    tokens = [w.tokens for w in transcript.windows]
    totals = transcript.totals()
    return {"method": method, "wall_s": wall, "windows": len(tokens), "tokens": totals["tokens"],
            "decode_s": totals["decode_s"], "accepted": totals["accepted"], "proposed": totals["proposed"],
            "exact": None if reference is None else tokens == reference, "text": transcript.text, "_tokens": tokens}


def run_stream(method: str, pipeline: Pipeline, samples: np.ndarray, args) -> dict:
    from as2d_core.cli.stream import _feed

    pipeline.transcribe(samples[: int(args.block_s * SAMPLE_RATE)], request_id="warm")
    session = pipeline.stream(args.block_s, args.context_s)
    for _ in _feed(session, samples, args.block_s, args.pace):
        pass
    return {**session.summary(), "method": method, "pace": args.pace}


def run_faster_whisper(method: str, samples: np.ndarray, threads: int, language: str) -> dict:
    from faster_whisper import WhisperModel

    from as2d_whisper.peers import build_ct2_folder  # faster-whisper reads the same whisper-base weights

    model = WhisperModel(str(build_ct2_folder()), device="cpu", compute_type=FW_PRECISIONS[method], cpu_threads=threads)
    options = dict(language=language, vad_filter=True, without_timestamps=True, beam_size=1)
    list(model.transcribe(samples[: 30 * SAMPLE_RATE], **options)[0])  # warm-up
    start = time.perf_counter()
    segments, _ = model.transcribe(samples, **options)
    texts = [s.text.strip() for s in segments]  # the generator does the work
    wall = time.perf_counter() - start
    return {"method": method, "wall_s": wall, "windows": len(texts), "tokens": None, "exact": None,
            "text": " ".join(texts)}


def _write(row: dict, path: Path | None) -> None:
    line = json.dumps(row, ensure_ascii=False)
    print(line, flush=True)
    if path is not None:
        with path.open("a") as out:
            out.write(line + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audio", type=Path)
    parser.add_argument("--methods", default="target-only,sd-k5,as2d,fw-fp32,fw-int8")
    parser.add_argument("--language", default="en")
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--source", default="whisper-tiny.en")
    parser.add_argument("--threads", type=int, default=2, help="target threads alone; faster-whisper's cpu_threads")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON lines here")
    parser.add_argument("--stream", action="store_true", help="a sustained stream per method instead of the file")
    parser.add_argument("--drafter-nice", type=int, default=DecodeOptions().drafter_nice,
                        help="niceness added to the drafter's threads (0: the target's priority)")
    parser.add_argument("--guess-nice", type=int, default=DecodeOptions().guess_nice,
                        help="the drafter's niceness on a single window whose language is not named")
    parser.add_argument("--block-s", type=float, default=4.0)
    parser.add_argument("--context-s", type=float, default=12.0)
    parser.add_argument("--pace", choices=("realtime", "fast"), default="realtime")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.stream and any(m in FW_PRECISIONS for m in methods):
        parser.error("--stream runs the as2d pipeline's methods only (target-only, sd-kN, as2d)")
    decoded = read_audio(args.audio)
    samples = decoded.samples
    decode = DecodeOptions(target_threads=args.threads, drafter_nice=args.drafter_nice,
                           guess_nice=args.guess_nice)
    options = PipelineOptions(language=args.language, decode=decode)
    target = build_part("target", args.target)
    source = build_source(args.source) if any(m == "as2d" or m.startswith("sd-k") for m in methods) else None
    rows, reference = [], None
    # target-only first: the others' windows are checked against its tokens
    for method in sorted(methods, key=lambda m: m != "target-only"):
        if args.stream:
            row = run_stream(method, as2d_pipeline(method, target, source, options), samples, args)
            _write(row, args.out)
            rows.append(row)
            continue
        if method in FW_PRECISIONS:
            row = run_faster_whisper(method, samples, args.threads, args.language)
        else:
            row = run_pipeline(method, as2d_pipeline(method, target, source, options), samples, reference)
            if method == "target-only":
                reference = row["_tokens"]
        row.pop("_tokens", None)
        row["audio_s"] = decoded.duration_s
        row["rtf"] = row["wall_s"] / decoded.duration_s
        rows.append(row)
        _write(row, args.out)
    if args.stream:
        print(f"\n{decoded.duration_s:.0f} s stream ({args.audio.name}), {args.block_s:g} s blocks, "
              f"{args.context_s:g} s context, {args.pace} pace\n")
        print("| method | active RTF | resource RTF | decode TPS | p50 lag (s) | p95 lag (s) | max queue wait (s) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['method']} | {r['active_rtf']:.3f} | {r['resource_rtf']:.3f} | {r['decode_tps']:.1f} | "
                  f"{r['p50_lag_s']:.2f} | {r['p95_lag_s']:.2f} | {r['max_queue_wait_s']:.2f} |")
        return
    base = next((r["wall_s"] for r in rows if r["method"] == "target-only"), None)
    print(f"\n{decoded.duration_s:.0f} s of audio ({args.audio.name}), {args.threads} threads\n")
    print("| method | wall (s) | RTF | vs target-only | windows | exact |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        speed = f"{base / r['wall_s']:.2f}x" if base else "-"
        exact = {True: "yes", False: "NO", None: "-"}[r["exact"]]
        print(f"| {r['method']} | {r['wall_s']:.1f} | {r['rtf']:.3f} | {speed} | {r['windows']} | {exact} |")


if __name__ == "__main__":
    main()
