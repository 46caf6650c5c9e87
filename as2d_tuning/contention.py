"""The contention harness: a drafter and the target measured alone and side by side, at each niceness.

``Background`` keeps one side busy for the length of a ``with`` block; ``drafter_costs`` measures one
drafter's jobs alone, what it does to the target's preparation and verification and what they do to
it, in rounds that take each kind in turn; ``episode_slowdowns`` reads the same ratios off the
engine's own as2d decodes.
"""
from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from as2d_core.contracts import Request, Source
from as2d_core.workers.priority import lower_thread_priority, run_at_lower_priority

from .costs import interpolate
from .stats import ProfileError, fit_pieces, pool, ratio, stat
from .timing import JobTiming, calibration_request, publish_cost, time_job, time_prepare, verify_sweep

if TYPE_CHECKING:
    from .measurement import Measurement


class Background(threading.Thread):
    """Runs ``work(stop)`` in a loop for the duration of a ``with`` block: the other model keeping its core busy.

    As a context manager it is started on entry and stopped and joined on exit, also when the
    measurement inside raises, so every concurrent measurement shares one start/stop protocol.
    ``niceness`` is added to the thread's own, as the engine's producer does for a drafter.
    """

    def __init__(self, work, niceness: int = 0) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.niceness = niceness
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        lower_thread_priority(self.niceness)
        try:
            while not self.stop.is_set():
                self.work(self.stop)
        except Exception as exc:  # reported by the measurement that needed this load
            self.error = f"{type(exc).__name__}: {exc}"

    def __enter__(self) -> "Background":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(60)


def check_load(load: Background, what: str) -> None:
    """A measurement beside a load is void if the load failed: say which."""
    if load.error is not None:
        raise ProfileError(f"{what} failed while it was measured: {load.error}")


def drafter_costs(measurement: Measurement, name: str, source: Source, session, sequence: list[int],
                  language: str, rng: random.Random) -> dict:
    """Everything one drafter costs alone and what it and the target do to each other, per niceness."""
    opts, target = measurement.options, measurement.target
    threads = opts.drafter_threads

    def bridge():
        return measurement.bridges[name](source, target, session)

    def jobs(requests: Sequence[Request], niceness: int = 0, warm: bool = True) -> list[JobTiming]:
        """A job per request (after one untimed, if ``warm``) in a fresh thread at ``niceness``, as a
        producer runs them."""
        def work():
            if warm:
                time_job(source, bridge, requests[-1], language, threads)
            return [time_job(source, bridge, request, language, threads) for request in requests]
        try:
            return run_at_lower_priority(niceness, work)
        except ProfileError:
            raise
        except Exception as exc:
            raise ProfileError(f"drafter {name} could not draft the calibration audio ({language}): "
                               f"{type(exc).__name__}: {exc}") from exc

    measurement.say(f"{name}: whole jobs alone at {len(measurement.lengths)} audio lengths")
    alone = jobs([measurement.request(s) for _ in range(measurement.job_repeats) for s in measurement.lengths])
    fit = fit_pieces(alone, f"drafter {name}")
    out = {
        "prepare_s": {f"{s:g}": stat([j.prepare_s for j in alone if abs(j.audio_s - s) < 1e-3],
                                     f"{name}'s encoder at {s:g} s") for s in measurement.lengths},
        "piece_s": fit,
        "publish_s": stat(publish_cost(opts.publication_size), "a publication"),
        "niceness": {},
    }
    full = measurement.request(measurement.full)
    full_copy = calibration_request(measurement.audio, measurement.full, measurement.language,
                                    "beside")  # its own log-mel

    def prepare_loop(stop):
        time_prepare(target, full_copy, opts.target_threads)

    def verify_loop(stop):  # the target verifying width 8 on its shared threads, as while drafting
        verify_sweep(session, sequence, [8], [0], 1, 0, rng)

    def drafter_loop(stop):
        time_job(source, bridge, full_copy, language, threads, stop)

    for nice in measurement.niceness:
        measurement.say(f"{name} at niceness {nice}: beside the target's preparation and verification")
        jobs([full], nice)  # the runtime at this niceness, warmed
        taken: dict[str, list[float]] = {k: [] for k in ("alone", "prepare", "verify", "target", "target beside")}
        started = time.perf_counter()
        for rounds in range(1, measurement.rounds + 1):  # each kind in turn, so a drift touches all of them alike
            taken["target"].append(time_prepare(target, full, opts.target_threads))
            with Background(drafter_loop, nice) as load:
                taken["target beside"].append(time_prepare(target, full, opts.target_threads))
            check_load(load, f"drafter {name} at niceness {nice}")
            taken["alone"] += [j.total_s for j in jobs([full], nice, warm=False)]
            with Background(prepare_loop) as load:
                taken["prepare"] += [j.total_s for j in jobs([full], nice, warm=False)]
            check_load(load, f"the target's preparation beside {name}")
            session.use_threads(opts.shared_target_threads)
            with Background(verify_loop) as load:
                taken["verify"] += [j.total_s for j in jobs([full], nice, warm=False)]
            check_load(load, f"the target's verification beside {name}")
            if rounds >= 3 and time.perf_counter() - started > measurement.limit_s:
                break  # a niced drafter on a busy machine can crawl: fewer rounds, not an endless profile
        with Background(drafter_loop, nice) as load:
            shared = verify_sweep(session, sequence, measurement.widths, measurement.offsets, measurement.repeats,
                                  measurement.warmup, rng)
        check_load(load, f"drafter {name} at niceness {nice}")
        session.use_threads(opts.target_threads)
        out["niceness"][str(nice)] = {
            "verify_s": pool(shared, measurement.widths, f"verification beside {name}"),
            "prepare_beside_s": stat(taken["target beside"], f"the target's preparation beside {name}"),
            "target_slowdown": {"prepare": ratio(taken["target beside"], taken["target"],
                                                 "the target's preparation")},
            "drafter_slowdown": {kind: ratio(taken[kind], taken["alone"], f"{name}'s job")
                                 for kind in ("prepare", "verify")},
            "rounds": rounds,
        }
    return out


def episode_slowdowns(runs, target_only, drafter: dict, audio_s: float) -> dict:
    """What a drafter and the target did to each other in the engine's own as2d decodes, as ratios to alone.

    The contention rounds time each side in a loop beside the other. In a decode the drafter starts
    with the request, beside the target's preparation, and goes on beside its verification, with the
    engine's loop and threads: the ORT drafter's pieces measured up to 2x alone there, against 1.3x
    beside the rounds' verification loop. Here: the target's preparation over target-only's, and the
    drafter's encoder and pieces (priced alone by the fit) before the decode clock starts and after.
    """
    fit = drafter["piece_s"]
    encoder = interpolate({float(k): v["median"] for k, v in drafter["prepare_s"].items()}, audio_s)
    taken = {"prepare": [0.0, 0.0], "verify": [0.0, 0.0]}  # seconds taken, seconds alone
    for run in runs:
        piece = 0
        for e in sorted(run.events, key=lambda e: e.start):
            took = e.end - e.start
            if e.kind == "draft-prepare" and took > 0:
                alone = encoder
            elif e.kind == "draft" and e.tokens and took >= 1e-3:  # not the bridging of pieces held back
                alone = (fit["first"] if piece == 0 else fit["next"]) + fit["per_token"] * e.tokens
                piece += 1
            else:
                continue
            before = min(max(run.clock[0] - e.start, 0.0), took)  # the part before the decode clock
            for kind, part in (("prepare", before), ("verify", took - before)):
                taken[kind][0] += part
                taken[kind][1] += alone * part / took
    return {"target_slowdown": {"prepare": statistics.median(r.prepare_s for r in runs)
                                / statistics.median(r.prepare_s for r in target_only)},
            "drafter_slowdown": {kind: took / alone for kind, (took, alone) in taken.items() if alone > 0},
            "decodes": len(runs)}
