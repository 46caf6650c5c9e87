"""Would drafted tokens speed up beam search? An upper bound: the target's own greedy output as a free draft.

On the bundled English windows (``tests/data/windows.jsonl``), in both timestamp modes, beam search runs
without proposals and then with each budget, each hypothesis proposed the draft's tokens after its own
length (``beam_search``'s ``propose``). The draft is made before the clock, so no drafter competes for the
cores: a real drafter can only do worse. Prints calls, CPU and wall seconds per budget, and whether every
beam result equals the one without proposals (it must: proposals only change how many positions a call scores).

    .venv/bin/python scripts/beam_drafts.py --target whisper-base --budgets 2,4 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from as2d_core.contracts import Request
from as2d_core.decode.beam import BeamOptions, beam_search
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters
from as2d_core.decode.request import run_request
from as2d_core.input.audio import load_audio
from as2d_core.setup.build import build_part

WINDOWS = Path(__file__).resolve().parents[1] / "tests" / "data" / "windows.jsonl"


def requests() -> list[Request]:
    rows = [json.loads(line) for line in WINDOWS.read_text().splitlines() if line.strip()]
    return [Request(r["id"], load_audio(WINDOWS.parent / r["path"]), language="en", timestamps=mode)
            for mode in ("none", "segment") for r in rows if r["lang"] == "en"]


def run(target, batch: list[Request], drafts: list[list[int]], beam: BeamOptions, budget: int):
    """Every request's beam result, the calls made, and CPU and wall seconds of the searches alone."""
    cpu = wall = 0.0
    calls, found = 0, []
    for request, draft in zip(batch, drafts):
        session = target.prepare(request, 2)
        rows = session.beam_rows(beam.beam_size)
        counters = Counters()
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        try:
            best = beam_search(rows, session.eos_token, session.max_new_tokens, beam, EventLog(), counters,
                               (lambda hypothesis, draft=draft: draft[len(hypothesis):]) if budget else None, budget)
        finally:
            cpu += time.process_time() - cpu_start
            wall += time.perf_counter() - wall_start
            rows.close()
            session.close()
        calls += counters.verify_calls + counters.target_only_steps
        found.append(best.tokens)
    return found, calls, cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--budgets", default="2,4", help="drafted tokens a row, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    target = build_part("target", args.target)
    batch = requests()
    drafts = [run_request(request, target, None, "target-only").tokens for request in batch]
    beam = BeamOptions(args.beam_size)
    for round_ in range(1, args.rounds + 1):
        reference, calls, cpu, wall = run(target, batch, drafts, beam, 0)
        print(f"round {round_} no proposals: {calls} calls, CPU {cpu:.2f} s, wall {wall:.2f} s")
        for budget in (int(b) for b in args.budgets.split(",")):
            try:
                found, calls, cpu, wall = run(target, batch, drafts, beam, budget)
            except ValueError as refused:  # the int8 target's beams graph takes no drafts
                print(f"round {round_} budget {budget}: refused: {refused}")
                continue
            same = "the same beams" if found == reference else "DIFFERENT BEAMS (a bug)"
            print(f"round {round_} budget {budget}: {calls} calls, CPU {cpu:.2f} s, wall {wall:.2f} s; {same}")


if __name__ == "__main__":
    main()
