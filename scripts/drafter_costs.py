"""Cost per token and acceptance of each Whisper drafter candidate, on the same windows and target.

For every drafter and English window: the drafter alone (its encoder, then its whole
decode on ``--drafter-threads``; ms per drafted token), then as2d on the target with
that drafter (acceptance, tokens per verify call, decode and end-to-end time) against
target-only on the same target. Every as2d output is checked against target-only (a
mismatch is reported, never hidden). Timings only mean something on a quiet machine.

    python scripts/drafter_costs.py --target whisper-base --target whisper-base-int8 \
        --drafter whisper-tiny.en --drafter whisper-tiny.en-ct2 --drafter whisper-tiny.en-ct2:first=0 \
        --out results/drafter_costs.jsonl

A drafter ``NAME:first=N,margin=S`` is the CTranslate2 drafter with ``first_call_tokens=N`` and
``audio_margin_s=S`` (its encoder on the audio plus S s of silence instead of the 30 s window).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.setup.build import build_part
from as2d_core.setup.catalog import resolve_bridge
from as2d_core.decode.options import DEFAULTS, STARTS

SPEECH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "speech"


def build(kind: str, spec: str):
    """A registered part; ``NAME:key=int,...`` passes options to its factory."""
    name, _, rest = spec.partition(":")
    options = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        options[{"first": "first_call_tokens", "margin": "audio_margin_s"}.get(key, key)] = int(value)
    return build_part(kind, name, **options)


def windows(manifest: Path, limit: int | None) -> list[tuple[str, Request]]:
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("lang") == "en"][:limit]
    return [(r["id"], Request(r["id"], load_audio(manifest.parent / r["path"]), language="en")) for r in rows]


def drafter_alone(source, request: Request, threads: int) -> dict:
    """Encoder time, then the whole decode: seconds, tokens, and when the first piece came."""
    start = time.perf_counter()
    job = source.prepare(request, "en", threads)
    encoded = time.perf_counter()
    first_piece, tokens = None, 0
    try:
        for piece in job.pieces():
            tokens += len(piece.tokens)
            first_piece = first_piece if first_piece is not None else time.perf_counter() - encoded
    finally:
        job.close()
    decode = time.perf_counter() - encoded
    return {"encode_s": encoded - start, "decode_s": decode, "tokens": tokens, "first_piece_s": first_piece,
            "ms_per_token": 1000 * decode / tokens if tokens else None, "ended_with_eos": job.ended_with_eos}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", help="target name (repeatable; default whisper-base)")
    parser.add_argument("--drafter", action="append", help="source name[:first=N] (repeatable)")
    parser.add_argument("--manifest", type=Path, default=SPEECH / "windows.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="at most this many English windows")
    parser.add_argument("--budget", type=int, default=DEFAULTS.budget)
    parser.add_argument("--drafter-threads", type=int, default=DEFAULTS.drafter_threads)
    parser.add_argument("--start", choices=STARTS, default=None,
                        help="when as2d's drafter starts (default: the engine's default)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per window (the median is kept)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines, one per (target, drafter, window)")
    args = parser.parse_args(argv)
    if not args.manifest.is_file():
        print(f"Error: no manifest at {args.manifest}", file=sys.stderr)
        return 2
    targets = {name: build("target", name) for name in args.target or ["whisper-base"]}
    drafters = {spec: build("source", spec) for spec in args.drafter or ["whisper-tiny.en", "whisper-tiny.en-ct2"]}
    items = windows(args.manifest, args.limit)
    options = DecodeOptions(budget=args.budget, drafter_threads=args.drafter_threads,
                            **({"start": args.start} if args.start else {}))
    out = args.out.open("w") if args.out else None
    rows = []
    for target_name, target in targets.items():
        run_request(items[0][1], target, None, "target-only")  # warm-up: sessions and caches, off the record
        for spec, source in drafters.items():
            bridge = resolve_bridge(source, target)
            drafter_alone(source, items[0][1], args.drafter_threads)
            for window, request in items:
                alone = [drafter_alone(source, request, args.drafter_threads) for _ in range(args.repeats)]
                reference = [run_request(request, target, None, "target-only") for _ in range(args.repeats)]
                as2d = [run_request(request, target, source, "as2d", options, bridge=bridge)
                        for _ in range(args.repeats)]
                median = lambda xs: statistics.median(xs)  # noqa: E731
                row = {
                    "target": target_name, "drafter": spec, "window": window,
                    "tokens": len(reference[0].tokens), "drafted": alone[0]["tokens"],
                    "drafter_encode_ms": 1000 * median([a["encode_s"] for a in alone]),
                    "drafter_ms_per_token": median([a["ms_per_token"] for a in alone if a["ms_per_token"]] or [0.0]),
                    "drafter_first_piece_ms": 1000 * median([a["first_piece_s"] or 0.0 for a in alone]),
                    "accepted": as2d[0].accepted, "proposed": as2d[0].proposed, "verify_calls": as2d[0].verify_calls,
                    "target_only_steps": as2d[0].target_only_steps,
                    "acceptance": as2d[0].accepted / as2d[0].proposed if as2d[0].proposed else None,
                    "exact": all(r.tokens == reference[0].tokens for r in as2d + reference),
                    "target_only_decode_s": median([r.decode_s for r in reference]),
                    "as2d_decode_s": median([r.decode_s for r in as2d]),
                    "target_only_e2e_s": median([r.e2e_s for r in reference]),
                    "as2d_e2e_s": median([r.e2e_s for r in as2d]),
                    "producer_error": as2d[0].producer_error,
                }
                rows.append(row)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                print(f"{target_name:18s} {spec:26s} {window:22s} drafter {row['drafter_ms_per_token']:6.2f} ms/token "
                      f"(encode {row['drafter_encode_ms']:5.0f} ms)  accepted {row['accepted']}/{row['proposed']}  "
                      f"decode x{row['target_only_decode_s'] / row['as2d_decode_s']:.2f}  "
                      f"e2e x{row['target_only_e2e_s'] / row['as2d_e2e_s']:.2f}  {'exact' if row['exact'] else 'MISMATCH'}",
                      flush=True)
    print("\nsummary (pooled over windows; ms/token and encode: medians)")
    for target_name in targets:
        for spec in drafters:
            group = [r for r in rows if r["target"] == target_name and r["drafter"] == spec]
            tokens = sum(r["tokens"] for r in group)
            accepted, proposed = sum(r["accepted"] for r in group), sum(r["proposed"] for r in group)
            calls = sum(r["verify_calls"] + r["target_only_steps"] for r in group)
            print(f"{target_name:18s} {spec:26s} drafter {statistics.median(r['drafter_ms_per_token'] for r in group):6.2f} ms/token, "
                  f"encode {statistics.median(r['drafter_encode_ms'] for r in group):5.0f} ms; acceptance "
                  f"{accepted / proposed if proposed else 0:.2f}, {tokens / calls if calls else 0:.2f} tokens per target call; "
                  f"decode TPS x{sum(r['target_only_decode_s'] for r in group) / sum(r['as2d_decode_s'] for r in group):.2f}, "
                  f"e2e x{sum(r['target_only_e2e_s'] for r in group) / sum(r['as2d_e2e_s'] for r in group):.2f} "
                  f"target-only; {sum(not r['exact'] for r in group)} mismatches")
    if out:
        out.close()
    return 1 if any(not r["exact"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
