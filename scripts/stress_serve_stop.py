"""Stop ``as2d serve`` with a signal while clients send, cycle after cycle: no request may be lost.

Each cycle starts a server, lets ``--clients`` threads send transcriptions of real windows back to
back, sends SIGTERM (or SIGINT, ``--signals``) at a random moment ``--stop-after`` seconds in, and
counts what became of every request:

- answered: 200 with the text the target gives alone (target-only, asked of the first server);
- wrong: 200 with another text;
- refused: 503 with Retry-After (the client then waits as told), or the connection refused once
  the server has closed its socket (nothing was accepted, so nothing was dropped);
- lost: anything else (a connection reset or cut, no answer, another status).

Every server must exit 0 within ``--grace-s`` plus a margin. A JSON summary goes to stdout (and
``--out``); exit status 1 when a request was lost or wrong or a server ended otherwise.

    python scripts/stress_serve_stop.py --cycles 3 --windows 6
    python scripts/stress_serve_stop.py --cycles 50 --windows 0 --out bench-out/stress_stop.json
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from as2d_serve.launch import ServerProcess
from soak_serve import load_windows, publish

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("AS2D_SPEECH_DIR", ROOT.parent / "shared" / "data" / "speech")) / "windows.jsonl"
DEFAULT_MANIFEST = SHARED if SHARED.is_file() else ROOT / "tests" / "data" / "windows.jsonl"
EXIT_MARGIN_S = 15.0  # past the grace period: a stopped decode ends at its next call; the socket closes


class Tally:
    """What became of one cycle's requests, shared by its clients."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.problems: list[str] = []
        self.signalled_at: float | None = None
        self._lock = threading.Lock()

    def add(self, outcome: str, problem: str | None = None) -> None:
        with self._lock:
            self.counts[outcome] += 1
            if outcome == "answered" and self.signalled_at is not None:
                self.counts["answered_after_signal"] += 1
            if problem:
                self.problems.append(f"{outcome}: {problem}")


def client(server: ServerProcess, windows, reference: dict, seed: int, stop: threading.Event, tally: Tally) -> None:
    """Send windows back to back until the server is gone, waiting as told after a 503."""
    rng = random.Random(seed)
    while not stop.is_set():
        name, data = rng.choice(windows)
        try:
            response = server.post(data)
        except httpx.ConnectError:
            tally.add("refused_closed")
            return
        except httpx.HTTPError as exc:
            tally.add("lost", f"{name}: {exc!r}")
            continue
        if response.status_code == 200:
            text = response.json()["text"]
            if text == reference[name]:
                tally.add("answered")
            else:
                tally.add("wrong", f"{name}: {text!r} != {reference[name]!r}")
        elif response.status_code == 503 and response.headers.get("Retry-After", "").isdigit():
            tally.add("refused_503")
            stop.wait(int(response.headers["Retry-After"]))
        else:
            tally.add("lost", f"{name}: status {response.status_code} {response.text[:200]}")


def target_only(server: ServerProcess, windows) -> dict:
    """Each window's text as the target alone gives it: the reference for every answer."""
    out = {}
    for name, data in windows:
        response = server.post(data, method="target-only")
        response.raise_for_status()
        out[name] = response.json()["text"]
    return out


def cycle(args, number: int, windows, reference: dict | None, rng: random.Random) -> tuple[dict, dict]:
    """One server, started, loaded with requests and stopped; the cycle's record and the reference."""
    log = tempfile.TemporaryFile(mode="w+")
    server = ServerProcess("--grace-s", str(args.grace_s), *args.serve_args, start_timeout_s=600, stderr=log)
    try:
        reference = reference or target_only(server, windows)
        tally, stop = Tally(), threading.Event()
        clients = [threading.Thread(target=client, args=(server, windows, reference, rng.random(), stop, tally))
                   for _ in range(args.clients)]
        for t in clients:
            t.start()
        stop_after = rng.uniform(*args.stop_after)
        time.sleep(stop_after)
        at_signal = {k: v for k, v in server.health().items() if k in ("active", "waiting")}
        signum = signal.Signals[f"SIG{args.signals[number % len(args.signals)]}"]
        tally.signalled_at = time.monotonic()
        server.process.send_signal(signum)
        try:
            status = server.process.wait(args.grace_s + EXIT_MARGIN_S)
        except subprocess.TimeoutExpired:
            status = None  # did not stop in time: killed below, and the check fails
        exit_s = time.monotonic() - tally.signalled_at
        stop.set()
        for t in clients:
            t.join(120)
    finally:
        server.stop()
    log.seek(0)
    record = {"cycle": number, "signal": signum.name, "stop_after_s": round(stop_after, 2), "at_signal": at_signal,
              "exit_status": status, "exit_s": round(exit_s, 2), "counts": dict(tally.counts),
              "problems": tally.problems}
    if status != 0 or tally.problems:
        record["server_log_tail"] = log.read()[-2000:]
    print(f"  cycle {number}: {signum.name} after {stop_after:.1f} s {at_signal}, exit {status} in {exit_s:.1f} s, "
          f"{dict(tally.counts)}", file=sys.stderr)
    return record, reference


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST,
                        help="JSONL of windows (id, path) [default: the shared set when present, else tests/data]")
    parser.add_argument("--windows", type=int, default=6, help="use only the first N windows (0: all)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--stop-after", type=float, nargs=2, default=(2.0, 12.0), metavar=("MIN_S", "MAX_S"),
                        help="the signal comes at a random moment this long after the clients start")
    parser.add_argument("--grace-s", type=float, default=10.0, help="the server's --grace-s")
    parser.add_argument("--signals", default="TERM,INT", help="used in turn, one per cycle")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve-arg", dest="serve_args", action="append", default=[],
                        help="extra `as2d serve` argument (repeat), e.g. --serve-arg=--decodes --serve-arg=2")
    args = parser.parse_args()
    args.signals = [s.strip().upper().removeprefix("SIG") for s in args.signals.split(",")]
    windows = load_windows(args.manifest)[: args.windows or None]
    print(f"stress: {args.cycles} cycles, {args.clients} clients, {len(windows)} windows of {args.manifest}",
          file=sys.stderr)
    rng, reference, cycles = random.Random(args.seed), None, []
    for number in range(args.cycles):
        record, reference = cycle(args, number, windows, reference, rng)
        cycles.append(record)
    totals = sum((Counter(c["counts"]) for c in cycles), Counter())
    checks = {
        "0 lost requests": totals["lost"] == 0,
        "0 wrong answers": totals["wrong"] == 0,
        "every server exited 0": all(c["exit_status"] == 0 for c in cycles),
    }
    report = {"cycles": len(cycles), "clients": args.clients, "grace_s": args.grace_s, "windows": len(windows),
              "totals": dict(totals), "max_exit_s": max(c["exit_s"] for c in cycles), "checks": checks,
              "per_cycle": cycles}
    return publish(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
