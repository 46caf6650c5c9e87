"""Many ``as2d run`` processes, two at a time, while a server is started and stopped beside them.

The crash this hunts: ``as2d run`` printed a correct answer and then died (status 134 or 139) when
another as2d process was working beside it, because its drafter was still inside a runtime call
at exit. Each run transcribes one window of the manifest with the default drafter; its text must
equal the target-only text of that window (decoded first, one process per window), and it must
exit 0. Beside the runs, ``stress_serve_stop`` cycles run in a loop: a server starts, four
clients send, the server is stopped with a signal, and every request must be answered or refused
with 503 (none lost).

    python scripts/stress_run.py --runs 300 --out bench-out/stress_run.json

A JSON summary goes to stdout (and ``--out``); exit status 1 when any run crashed, exited non-zero
or gave another text, or when a server cycle lost a request.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import stress_serve_stop
from soak_serve import load_windows, publish

ROOT = Path(__file__).resolve().parents[1]


def as2d_run(path: str, *flags: str) -> tuple[int, str, str]:
    """One ``as2d run PATH --json`` process: its status, its text, the tail of its stderr."""
    done = subprocess.run([sys.executable, "-m", "as2d_core.cli.main", "run", path, "--json", *flags],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    text = None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            text = json.loads(line)["text"]
    return done.returncode, text, done.stderr[-1000:]


def server_cycles(args, windows, stop: threading.Event, records: list) -> None:
    """``stress_serve_stop`` cycles back to back until ``stop`` is set."""
    rng, reference = random.Random(args.seed), None
    for number in itertools.count():
        if stop.is_set():
            return
        record, reference = stress_serve_stop.cycle(args, number, windows, reference, rng)
        records.append(record)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, default=stress_serve_stop.DEFAULT_MANIFEST)
    parser.add_argument("--languages", default="en", help="only windows of these languages (comma-separated; '' for all)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--no-server", action="store_true", help="no server cycles beside the runs")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--stop-after", type=float, nargs=2, default=(2.0, 12.0), metavar=("MIN_S", "MAX_S"))
    parser.add_argument("--grace-s", type=float, default=10.0)
    parser.add_argument("--signals", default="TERM,INT")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.signals = [s.strip().upper().removeprefix("SIG") for s in args.signals.split(",")]
    args.serve_args = []
    rows = [json.loads(line) for line in args.manifest.read_text().splitlines() if line.strip()]
    wanted = {x for x in args.languages.split(",") if x}
    rows = [r for r in rows if not wanted or r.get("lang") in wanted]
    paths = [str((args.manifest.parent / r["path"]).resolve()) for r in rows]
    print(f"stress: {args.runs} runs of {len(paths)} windows, {args.parallel} at a time", file=sys.stderr)

    reference = {}
    for path in paths:  # target-only, one process per window, before anything runs beside it
        status, text, err = as2d_run(path, "--method", "target-only")
        if status != 0:
            raise SystemExit(f"target-only failed on {path} ({status}): {err}")
        reference[path] = text

    stop, cycles = threading.Event(), []
    server = None
    if not args.no_server:
        served = load_windows(args.manifest)[:6]
        server = threading.Thread(target=server_cycles, args=(args, served, stop, cycles), daemon=True)
        server.start()
    statuses, problems = Counter(), []
    started = time.monotonic()

    def one(number: int) -> None:
        path = paths[number % len(paths)]
        status, text, err = as2d_run(path)
        statuses[status] += 1
        if status != 0:
            problems.append({"run": number, "window": Path(path).name, "status": status,
                             "text_correct": text == reference[path], "stderr": err})
        elif text != reference[path]:
            problems.append({"run": number, "window": Path(path).name, "status": status, "wrong_text": text,
                             "expected": reference[path]})
        if (number + 1) % 25 == 0:
            print(f"  {number + 1} runs, statuses {dict(statuses)}, {len(problems)} problems, "
                  f"{len(cycles)} server cycles", file=sys.stderr)

    with ThreadPoolExecutor(args.parallel) as pool:
        list(pool.map(one, range(args.runs)))
    stop.set()
    if server is not None:
        server.join()
    totals = sum((Counter(c["counts"]) for c in cycles), Counter())
    crashed = sum(n for status, n in statuses.items() if status != 0)
    wrong = sum(1 for p in problems if "wrong_text" in p)
    checks = {
        "0 non-zero exits": crashed == 0,
        "0 wrong texts": wrong == 0,
        "0 lost server requests": totals["lost"] == 0 and totals["wrong"] == 0,
        "every server exited 0": all(c["exit_status"] == 0 for c in cycles),
    }
    report = {"runs": args.runs, "parallel": args.parallel, "windows": len(paths), "wall_s": time.monotonic() - started,
              "exit_statuses": {str(k): v for k, v in statuses.items()}, "wrong_texts": wrong, "problems": problems,
              "server_cycles": len(cycles), "server_totals": dict(totals), "checks": checks,
              "per_cycle": cycles}
    return publish(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
