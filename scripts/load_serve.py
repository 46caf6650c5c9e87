"""Load ``as2d serve`` with concurrent clients: throughput and latency, one slot against the scheduler.

For each ``--slots`` value a fresh server on 127.0.0.1 (``--slots 1``: today's one decode at a time;
above 1: that many requests at once through the scheduler, ``as2d_core.decode.scheduler``), and for each
``--clients`` level that many clients in a closed loop, each sending the next of the real English clips
(mixed lengths: ``tests/data`` and, when present, ``../shared/data/speech``) until ``--requests`` are
answered or ``--level-s`` has passed. It reports requests/s, audio seconds/s and latency p50/p95 per
level, and checks that every clip's text is the same in every answer (a batch changes no row's output).

    python scripts/load_serve.py --slots 1,4 --clients 1,2,4,8 --requests 16 --out bench-out/load.json

Loopback only; bounded in count (``--requests`` per level) and time (``--level-s`` per level).
Exit status 1 when an answer failed or a clip's text differed between answers.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from as2d_serve.launch import ServerProcess, run_clients

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = (ROOT / "tests" / "data" / "windows.jsonl", ROOT / "tests" / "data" / "clips.jsonl",
             ROOT.parent / "shared" / "data" / "speech" / "windows.jsonl")


def load_clips(manifests: list[Path], language: str, limit: int) -> list[dict]:
    """Clips in ``language`` (id, bytes, seconds), interleaved long and short so every level sees both."""
    clips = []
    for manifest in manifests:
        if not manifest.is_file():
            continue
        for line in manifest.read_text().splitlines():
            row = json.loads(line) if line.strip() else None
            if row and row.get("lang") == language:
                path = Path(row["path"])
                path = path if path.is_absolute() else manifest.parent / path
                clips.append({"id": row["id"], "data": path.read_bytes(), "seconds": float(row["duration_s"])})
    if not clips:
        raise SystemExit(f"no {language} clips in {', '.join(map(str, manifests))}")
    clips.sort(key=lambda c: c["seconds"])
    mixed = [clips[i] for pair in zip(range(len(clips)), reversed(range(len(clips)))) for i in pair]
    return list({c["id"]: c for c in mixed}.values())[: limit or None]


def level(server: ServerProcess, clips: list[dict], clients: int, requests: int, level_s: float) -> dict:
    """``clients`` closed-loop clients until ``requests`` answers or ``level_s``; each answer's text by clip."""
    jobs = iter(range(requests))
    lock = threading.Lock()
    answers: list[dict] = []
    stop = time.perf_counter() + level_s

    def client() -> None:
        while time.perf_counter() < stop:
            with lock:
                number = next(jobs, None)
            if number is None:
                return
            clip = clips[number % len(clips)]
            start = time.perf_counter()
            response = server.post(clip["data"], response_format="verbose_json")
            took = time.perf_counter() - start
            body = response.json() if response.status_code == 200 else {}
            with lock:
                answers.append({"clip": clip["id"], "seconds": clip["seconds"], "latency_s": took,
                                "status": response.status_code, "text": body.get("text"),
                                "drafted": (body.get("as2d", {}).get("batch") or {}).get("drafted",
                                                                                         bool(body.get("as2d", {}).get("source")))})

    elapsed = run_clients(clients, client)
    done = [a for a in answers if a["status"] == 200]
    latencies = [a["latency_s"] for a in done]
    return {"clients": clients, "answers": len(done), "failures": len(answers) - len(done), "elapsed_s": elapsed,
            "requests_per_s": len(done) / elapsed, "audio_s_per_s": sum(a["seconds"] for a in done) / elapsed,
            "p50_s": float(np.percentile(latencies, 50)) if latencies else None,
            "p95_s": float(np.percentile(latencies, 95)) if latencies else None,
            "drafted": sum(bool(a["drafted"]) for a in done), "texts": [(a["clip"], a["text"]) for a in done]}


def table(rows: list[dict]) -> str:
    lines = ["| server | clients | answers | req/s | audio s/s | p50 s | p95 s | drafted |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['server']} | {r['clients']} | {r['answers']} | {r['requests_per_s']:.3f} | "
                     f"{r['audio_s_per_s']:.2f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} | {r['drafted']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", default="1,4", help="servers to compare: 1 is one decode at a time")
    parser.add_argument("--clients", default="1,2,4,8")
    parser.add_argument("--requests", type=int, default=16, help="answers per level (at most)")
    parser.add_argument("--level-s", type=float, default=120.0, help="no new request after this long in a level")
    parser.add_argument("--clips", type=int, default=0, help="use only the first N clips (0: all)")
    parser.add_argument("--language", default="en")
    parser.add_argument("--manifest", type=Path, action="append", default=None, help="JSONL of clips (repeat)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve-arg", dest="serve_args", action="append", default=[],
                        help="extra `as2d serve` argument (repeat), e.g. --serve-arg=--speculate-rows --serve-arg=2")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    clips = load_clips(args.manifest or list(MANIFESTS), args.language, args.clips)
    print(f"load: {len(clips)} clips, {min(c['seconds'] for c in clips):.1f}-{max(c['seconds'] for c in clips):.1f} s",
          file=sys.stderr)
    rows = []
    for slots in (int(s) for s in args.slots.split(",")):
        name = "one slot" if slots == 1 else f"scheduler, {slots} slots"
        server = ServerProcess("--slots", str(slots), "--queue-size", str(max(clients) * 2), *args.serve_args,
                               start_timeout_s=600)
        try:
            server.post(clips[0]["data"])  # warm-up: lazily built sessions
            for count in clients:
                row = {"server": name, "slots": slots, **level(server, clips, count, args.requests, args.level_s)}
                print(f"  {name}, {count} client(s): {row['requests_per_s']:.3f} req/s, p95 {row['p95_s']:.2f} s",
                      file=sys.stderr)
                rows.append(row)
        finally:
            server.stop()
    texts: dict[str, set] = {}
    for row in rows:
        for clip, text in row.pop("texts"):
            texts.setdefault(clip, set()).add(text)
    differing = sorted(clip for clip, seen in texts.items() if len(seen) > 1)
    report = {"clips": [{"id": c["id"], "seconds": c["seconds"]} for c in clips], "levels": rows,
              "clips_with_differing_text": differing, "command": " ".join(sys.argv)}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    print(table(rows))
    failures = sum(r["failures"] for r in rows)
    print(f"failures: {failures}; clips whose text differed between answers: {differing or 'none'}", file=sys.stderr)
    return 1 if failures or differing else 0


if __name__ == "__main__":
    sys.exit(main())
