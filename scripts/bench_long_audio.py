"""Whole-file wall clock: as2d, target-only, serial SD and the outside peers on one long recording.

Every model is loaded (and warmed on the first 30 s) before its clock starts; each clock covers
the whole file from decoded samples to text: voice-activity detection, every window's encoder,
prefill and decoding. as2d, target-only and sd-kN decode the same Silero VAD windows through
``as2d_core.input.pipeline.Pipeline``; their per-window tokens are compared with target-only's (exact).
Any other method is an outside peer that a plugin offers through ``register_peers`` with
``whole_file=True`` (``as2d_core.setup.peers.FilePeer``), run the way its users run it, with its own
VAD: the Whisper plugin's ``faster-whisper`` (sequential, temperature 0, no fallback, no conditioning:
the equal-decoding row), ``faster-whisper-default`` (its shipped temperature fallback and conditioning),
``faster-whisper-batched4``/``-batched8`` (``BatchedInferencePipeline``, greedy) and ``-batched8-beam5``, each
also ``-int8``; and
``whisper.cpp`` (pywhispercpp on whisper-base written as ggml f16: greedy, temperature 0, no fallback,
no conditioning, its own 30 s windows walked by the timestamps it predicts, no VAD).
One JSON line per method and round, then a Markdown table of each method's median over the rounds.

Our rows decode in the mode the decoding flags give (``--route``, ``--beam-size``, ``--temperature``,
``--condition-on-previous-text``: as2d run's). With a reference (``--reference``, by default the recording's
sidecar JSON that ``make_long_audio.py`` writes) every row also gets its word error rate against the clips'
texts, lower-cased and without punctuation, and the words it deleted, inserted and substituted: the quality
benchmark. Matched settings, each ours beside faster-whisper's sequential ``transcribe()`` with the same options:

    .venv/bin/python scripts/make_long_audio.py --seconds 400 --once --out /tmp/long_once.wav
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_once.wav --beam-size 1 \\
        --methods target-only,as2d,faster-whisper-greedy-fallback          # greedy with the fallback
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_once.wav --beam-size 5 \\
        --methods target-only,as2d,faster-whisper-beam5-fallback           # beam 5 with the fallback
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_once.wav --route windows --batch-windows 1,4,auto \\
        --profile profiles/this-machine.json --methods target-only,as2d,faster-whisper-batched8   # VAD windows, batched

``--batch-windows`` lists the wave sizes our methods run with: 1 (one window at a time, the row METHOD), N (waves
of N, METHOD-batchedN) and ``auto`` (METHOD-auto: the wave size and whether the windows draft, priced from
``--profile``'s batch costs, else the default rule, as ``as2d run --route windows`` chooses; ``as2d_core.input.waves``).
Each row records the route it took (``route``: wave size, drafting, why), and the table is followed by them.

``--rounds N`` (default 3) runs every method once per round, in the same order each round, so a slow
drift of a shared machine touches all methods alike; the table quotes medians and the ratios of medians.

CTranslate2 (faster-whisper) and whisper.cpp (OpenMP) wait on their threads by spinning, so a peer timed
while other work runs is slowed unfairly: run this with the other cores idle. Before each timed run the
machine's load is read: the 1-minute load average, and over 1 s the cores busy with other processes than
this one (the 1-minute average still holds this script's previous method). A warning is printed, and the
row marked, when others keep more than half of each core this run does not use busy (at least half a core).

``--stream`` feeds the file instead as a sustained stream (``as2d stream``'s blocks, views and
pacing) once per method, serial SD included, and prints each method's stream summary.

    .venv/bin/python scripts/make_long_audio.py --seconds 600 --out /tmp/long_en_600s.wav
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_en_600s.wav \\
        --methods target-only,sd-k5,as2d,faster-whisper,faster-whisper-batched8-int8,whisper.cpp --out /tmp/long_en_600s.bench.jsonl
    .venv/bin/python scripts/bench_long_audio.py /tmp/long_en_600s.wav --stream --pace realtime \\
        --methods target-only,sd-k5,as2d --out /tmp/long_en_600s.stream.jsonl
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import time
from pathlib import Path

import attrs
import numpy as np

from as2d_core.decode.methods import get_method
from as2d_core.input.audio import read_audio
from as2d_core.setup.build import DEFAULT_SOURCE, build_part, build_pipeline, build_source
from as2d_core.decode.options import AUTO, ROUTES, DecodeOptions, wave_size
from as2d_core.setup.paths import models_dir
from as2d_core.setup.peers import FilePeer
from as2d_core.setup.plugins import load_registry
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from as2d_core.input.stream import PACES

SAMPLE_RATE = 16_000
PIPELINE_METHODS = "target-only,sd-k5,as2d"


def as2d_pipeline(method: str, target, source, options: PipelineOptions) -> Pipeline:
    return build_pipeline(target, source if get_method(method).needs_source else None,
                          attrs.evolve(options, method=method))


def normalized(text: str) -> str:
    """Lower-cased words without punctuation (apostrophes too), as the word error rate compares them."""
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).replace("'", "").split())


def word_errors(hypothesis: str, reference: str) -> dict:
    """Word error rate and its parts against ``reference`` (both ``normalized``)."""
    import jiwer

    out = jiwer.process_words(normalized(reference), normalized(hypothesis) or "-")
    return {"wer": round(out.wer, 4), "deleted": out.deletions, "inserted": out.insertions,
            "substituted": out.substitutions, "reference_words": out.hits + out.substitutions + out.deletions}


def run_pipeline(method: str, pipeline: Pipeline, samples: np.ndarray, reference: list | None, threads: int) -> dict:
    pipeline.transcribe(samples[: 30 * SAMPLE_RATE], request_id="warm")
    load = machine_load(threads)
    start = time.perf_counter()
    transcript = pipeline.transcribe(samples, request_id=method)
    wall = time.perf_counter() - start
    tokens = [w.tokens for w in transcript.windows]
    totals = transcript.totals()
    return {"method": method, "wall_s": wall, "windows": len(tokens), "tokens": totals["tokens"],
            "decode_s": totals["decode_s"], "accepted": totals["accepted"], "proposed": totals["proposed"],
            "exact": None if reference is None else tokens == reference, "text": transcript.text, "_tokens": tokens,
            "segment_texts": [s.text.strip() for s in transcript.segments], "route": transcript.route, **load}


def run_stream(method: str, pipeline: Pipeline, samples: np.ndarray, args) -> dict:
    pipeline.transcribe(samples[: int(args.block_s * SAMPLE_RATE)], request_id="warm")
    session = pipeline.stream(args.block_s, args.context_s)
    for _ in session.replay(samples, args.pace):
        pass
    return {**session.summary(), "method": method, "pace": args.pace}


def whole_file_peers() -> list[str]:
    """The peers the installed plugins offer for whole recordings."""
    registry = load_registry()
    return [name for name in registry.names("peer") if registry.get("peer", name).info.get("whole_file")]


def build_file_peer(method: str, threads: int) -> FilePeer:
    """A peer as the plugin offers it (``register_peers``), on ``threads`` threads, the same weights as the target."""
    part = load_registry().get("peer", method)
    peer = part.factory({"threads": threads, "models_dir": models_dir()}) if part.info.get("whole_file") else None
    if not isinstance(peer, FilePeer):
        raise SystemExit(f"peer {method} decodes single windows only (as2d bench runs it); whole-file peers: "
                         f"{', '.join(whole_file_peers())}")
    return peer


def run_file_peer(method: str, peer: FilePeer, samples: np.ndarray, language: str, threads: int) -> dict:
    peer.transcribe_file(samples[: 30 * SAMPLE_RATE], language)  # warm-up
    load = machine_load(threads)
    out = peer.transcribe_file(samples, language)
    return {"method": method, "wall_s": out.wall_s, "windows": out.segments, "tokens": None, "exact": None,
            "text": out.text, "note": out.note, **out.extra, **load}


def machine_load(threads: int, sample_s: float = 1.0) -> dict:
    """The load this run's clock is about to share the machine with: the 1-minute load average, and the cores
    other processes kept busy over ``sample_s`` while this one waited. ``busy``: more than half of each core
    this run leaves free (at least half a core) was busy with others."""
    import psutil

    me, cores = psutil.Process(), os.cpu_count() or 1
    me.cpu_percent(None)
    psutil.cpu_percent(None)
    time.sleep(sample_s)
    others = max(0.0, psutil.cpu_percent(None) / 100 * cores - me.cpu_percent(None) / 100)
    load_1m, load_5m, _ = os.getloadavg()
    limit = 0.5 * max(1, cores - threads)
    if others > limit:
        print(f"warning: other processes keep {others:.1f} of {cores} cores busy (limit {limit:.1f} with {threads} "
              f"threads ours; 1-minute load {load_1m:.2f}): CTranslate2 and whisper.cpp peers spin on their threads and are slowed "
              "unfairly, and so is every other method; run with the other cores idle", flush=True)
    return {"load_1m": round(load_1m, 2), "load_5m": round(load_5m, 2), "others_busy_cores": round(others, 2),
            "cores": cores, "busy": others > limit}


def _write(row: dict, path: Path | None) -> None:
    line = json.dumps(row, ensure_ascii=False)
    print(line, flush=True)
    if path is not None:
        with path.open("a") as out:
            out.write(line + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audio", type=Path)
    parser.add_argument("--methods", default=None,
                        help=f"comma-separated: {PIPELINE_METHODS} (the as2d pipeline) and whole-file peers "
                             "(default: those three and every whole-file peer the plugins offer)")
    parser.add_argument("--language", default="en")
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--source", default=DEFAULT_SOURCE, help="the drafter (default: as2d run's)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every method, interleaved; medians reported")
    parser.add_argument("--threads", type=int, default=2, help="target threads alone; every peer's threads")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON lines here")
    parser.add_argument("--stream", action="store_true", help="a sustained stream per method instead of the file")
    parser.add_argument("--drafter-nice", type=int, default=DecodeOptions().drafter_nice,
                        help="niceness added to the drafter's threads (0: the target's priority)")
    parser.add_argument("--guess-nice", type=int, default=DecodeOptions().guess_nice,
                        help="the drafter's niceness on a single window whose language is not named")
    parser.add_argument("--block-s", type=float, default=4.0)
    parser.add_argument("--context-s", type=float, default=12.0)
    parser.add_argument("--pace", choices=PACES, default="realtime")
    parser.add_argument("--route", choices=ROUTES, default=DecodeOptions().route, help="our rows' route (as2d run's)")
    parser.add_argument("--beam-size", type=int, default=DecodeOptions().beam_size)
    parser.add_argument("--temperature", default=",".join(map(str, DecodeOptions().temperature)),
                        help="our rows' temperatures, comma-separated (0 alone: no fallback)")
    parser.add_argument("--condition-on-previous-text", action="store_true")
    parser.add_argument("--label", default=None, help="the setting's name in every row (scripts/results.py groups "
                        "rows by it; default: route, beams, temperatures and conditioning)")
    parser.add_argument("--reference", type=Path, default=None,
                        help="clip texts for word error rates (default: the audio's .json beside it, if any)")
    parser.add_argument("--batch-windows", default="1",
                        help="comma-separated: our methods also run with that many windows side by side "
                             "(a row METHOD-batchedN for each N above 1; DecodeOptions.batch_windows), or auto "
                             "(a row METHOD-auto: chosen as as2d run --route windows chooses)")
    parser.add_argument("--profile", default=None,
                        help="a device profile (as2d profile) whose batch costs price --batch-windows auto, and "
                             "whether a wave of a given size drafts (default: none, so a given size drafts)")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
    peers = load_registry().names("peer")
    if args.methods is None:
        args.methods = ",".join([PIPELINE_METHODS] if args.stream else [PIPELINE_METHODS, *whole_file_peers()])
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.stream and args.batch_windows != "1":
        parser.error("--stream decodes each block alone: --batch-windows is for whole files")
    if args.stream and any(m in peers for m in methods):
        parser.error("--stream runs the as2d pipeline's methods only (target-only, sd-kN, as2d)")
    decoded = read_audio(args.audio)
    samples = decoded.samples
    decode = DecodeOptions(target_threads=args.threads, drafter_nice=args.drafter_nice, guess_nice=args.guess_nice,
                           route=args.route, beam_size=args.beam_size, temperature=args.temperature,
                           condition_on_previous_text=args.condition_on_previous_text, profile=args.profile)
    label = args.label or (f"{args.route} beam {args.beam_size} T {args.temperature}"
                           + (" conditioned" if args.condition_on_previous_text else ""))
    sidecar = args.reference or args.audio.with_suffix(".json")
    truth = " ".join(c["text"] for c in json.loads(sidecar.read_text())) if sidecar.is_file() else None
    options = PipelineOptions(language=args.language, decode=decode)
    target = build_part("target", args.target)
    drafting = any(m not in peers and get_method(m).needs_source for m in methods)
    source = build_source(args.source) if drafting else None
    rows, reference = [], None
    try:
        batches = [wave_size(b) for b in args.batch_windows.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    ours = {m if b == 1 else f"{m}-{b}" if b == AUTO else f"{m}-batched{b}": (m, b)
            for m in methods if m not in peers for b in batches}
    order = sorted([*ours, *(m for m in methods if m in peers)],
                   key=lambda m: m != "target-only")  # target-only first: the others are checked against it
    if args.stream:
        for method in order:
            row = run_stream(method, as2d_pipeline(method, target, source, options), samples, args)
            _write(row, args.out)
            rows.append(row)
        print(f"\n{decoded.duration_s:.0f} s stream ({args.audio.name}), {args.block_s:g} s blocks, "
              f"{args.context_s:g} s context, {args.pace} pace\n")
        print("| method | active RTF | resource RTF | decode TPS | p50 lag (s) | p95 lag (s) | max queue wait (s) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['method']} | {r['active_rtf']:.3f} | {r['resource_rtf']:.3f} | {r['decode_tps']:.1f} | "
                  f"{r['p50_lag_s']:.2f} | {r['p95_lag_s']:.2f} | {r['max_queue_wait_s']:.2f} |")
        return
    for round_ in range(1, args.rounds + 1):
        for method in order:
            if method in peers:  # built here and dropped after its row: one peer's models in memory at a time
                row = run_file_peer(method, build_file_peer(method, args.threads), samples, args.language,
                                    args.threads)
            else:
                name, batch = ours[method]
                together = attrs.evolve(options, decode=attrs.evolve(decode, batch_windows=batch))
                row = run_pipeline(method, as2d_pipeline(name, target, source, together), samples, reference,
                                   args.threads)
                if name == "target-only" and reference is None:
                    reference = row["_tokens"]
            row.pop("_tokens", None)
            if truth is not None:
                row.update(word_errors(row["text"], truth))
            row.update(round=round_, audio_s=decoded.duration_s, rtf=row["wall_s"] / decoded.duration_s,
                       target=args.target, setting=label,
                       source=args.source if method in ours and get_method(ours[method][0]).needs_source else None)
            rows.append(row)
            _write(row, args.out)
    print_table(rows, order, [m for m in order if m in peers], decoded.duration_s, args)


def same_segments(ours: list[str], theirs: list[str]) -> float:
    """The share of our segments that a peer's segments hold with the same words, in the same order."""
    matcher = difflib.SequenceMatcher(a=[normalized(t) for t in ours], b=[normalized(t) for t in theirs],
                                      autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / max(len(ours), 1)


def _median_of(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    return f"{statistics.median(values):g}" if values else "-"


def print_table(rows: list[dict], order: list[str], peers: list[str], audio_s: float, args) -> None:
    """Each method's median wall over the rounds, its ratio to target-only's median and to the fastest peer's."""
    by_method = {m: [r for r in rows if r["method"] == m] for m in order}
    median = {m: statistics.median(r["wall_s"] for r in runs) for m, runs in by_method.items()}
    base = median.get("target-only")
    fastest = min(peers, key=median.get) if peers else None
    print(f"\n{audio_s:.0f} s of audio ({args.audio.name}), {args.threads} threads, {args.rounds} rounds, "
          f"drafter {args.source}\n")
    print(f"| method | wall (s) per round | median wall (s) | RTF | vs target-only | vs {fastest or 'fastest peer'} | "
          "windows | exact | WER | deleted | busy rounds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for m, runs in by_method.items():
        exact = [r["exact"] for r in runs]
        shown = "-" if exact[0] is None else ("yes" if all(exact) else f"NO ({exact.count(False)} of {len(exact)})")
        busy = sum(1 for r in runs if r["busy"])
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        print(f"| {m} | {walls} | {median[m]:.2f} | {median[m] / audio_s:.3f} | "
              f"{f'{base / median[m]:.2f}x' if base else '-'} | "
              f"{f'{median[fastest] / median[m]:.2f}x' if fastest else '-'} | {runs[0]['windows']} | {shown} | "
              f"{_median_of(runs, 'wer')} | {_median_of(runs, 'deleted')} | {busy}{' (busy!)' if busy else ''} |")
    print("\nCTranslate2 and whisper.cpp peers spin on their threads: their rows are fair only with the other cores idle "
          "(a round marked busy was timed while other processes kept cores busy).")
    for m in order:  # how each of our rows decoded the file (the first round's: the choice does not change)
        route = by_method[m][0].get("route")
        if route and route.get("route") == "windows":
            print(f"{m}: waves of {route['wave_size']}, {'drafting' if route['drafts'] else 'target-only'} "
                  f"({route['why']})")
    ours = [m for m in order if m not in peers and by_method[m][0].get("segment_texts")]
    theirs = [m for m in peers if by_method[m][0].get("segment_texts")]
    for mine in ours:  # the same words, segment by segment (first round's: the words do not change between rounds)
        first = by_method[mine][0]["segment_texts"]
        shares = ", ".join(f"{p} {same_segments(first, by_method[p][0]['segment_texts']):.1%}" for p in theirs)
        if shares:
            print(f"{mine}: segments with the same words as {shares}")

if __name__ == "__main__":
    main()
