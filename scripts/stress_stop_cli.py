"""Stop ``as2d run`` or ``as2d stream`` at random moments and count the stops that did not end cleanly.

Each round starts the command on AUDIO, waits until it has installed its stop handlers, waits a random
time (none, up to 0.5 s, up to 2 s or up to 8 s: model loading, audio decoding, decoding), sends SIGTERM
or SIGINT and checks the end: status 128+signal, no traceback, no "terminate called" (a native abort),
and an end within the time limit (a stop that was lost lets the command run on). Every bad end's stderr is
written beside the report. Run it with another load on the machine too: the faults it found were races.

    python scripts/stress_stop_cli.py AUDIO --rounds 60 --command stream --out bench-out/stop_stream.json
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path


def handles_stops(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler yet (Linux: SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def one_stop(command: str, audio: Path, rng: random.Random, limit_s: float) -> dict:
    number = rng.choice([signal.SIGTERM, signal.SIGINT])
    after_s = rng.choice([0.0, rng.uniform(0, 0.5), rng.uniform(0, 2), rng.uniform(0, 8)])
    args = [command, str(audio), "--language", "en"] + (["--pace", "realtime"] if command == "stream" else [])
    process = subprocess.Popen([sys.executable, "-m", "as2d_core.cli.main", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while process.poll() is None and not handles_stops(process.pid):
        time.sleep(0.02)
    time.sleep(after_s)
    process.send_signal(number)
    try:
        _, stderr = process.communicate(timeout=limit_s)
        lost = False
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        lost = True
    problems = (["the stop was lost"] if lost else []) + (
        [f"status {process.returncode}"] if not lost and process.returncode != 128 + number else []) + (
        ["traceback"] if "Traceback" in stderr else []) + (["native abort"] if "terminate called" in stderr else [])
    return {"signal": signal.Signals(number).name, "after_s": round(after_s, 2), "status": process.returncode,
            "problems": problems, "stderr": stderr[-4000:] if problems else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", type=Path)
    parser.add_argument("--command", choices=["run", "stream"], default="run")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--limit-s", type=float, default=40.0, help="a stop not ended by then was lost")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-out/stop_cli.json"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rounds = []
    for index in range(args.rounds):
        outcome = one_stop(args.command, args.audio, rng, args.limit_s)
        rounds.append(outcome)
        print(index, outcome["signal"], outcome["after_s"], outcome["status"], ", ".join(outcome["problems"]) or "ok",
              flush=True)
    bad = [r for r in rounds if r["problems"]]
    report = {"command": args.command, "audio": str(args.audio), "rounds": len(rounds), "clean": len(rounds) - len(bad),
              "bad": bad}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['clean']} of {len(rounds)} stops clean; report: {args.out}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
