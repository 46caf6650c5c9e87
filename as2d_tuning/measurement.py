"""What one device profile measures and in which order (Appendix B.2, D.2.1, D.2.2): :class:`Measurement`.

See ``as2d_tuning.profile`` for what the profile holds; the timing of single operations is in
``timing``, the drafter-beside-target rounds in ``contention``, the statistics in ``stats``.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from as2d_core.contracts import BridgeFactory, Request, Source, Target
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.setup.catalog import resolve_bridge

from .batching import WaveDecodes, batch_section
from .contention import drafter_costs, episode_slowdowns
from .stats import by_offset, pool, r_of_k, spread, stat, theil_sen
from .timing import calibration_request, calls_by_width, continuation, loop_residual, time_prepare, verify_sweep


# Audio lengths (s) the preparation and the drafters are measured at: the CTranslate2 drafter's encoder
# input changes where a clip starts to be chunked (10 s, 20 s), so both sides of each step are measured.
LENGTHS = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 11.0, 13.0, 16.0, 20.0, 21.0, 25.0, 30.0)


@attrs.define
class Measurement:
    """What one profile measures and how (the CLI's options); ``say`` reports progress."""

    target: Target
    sources: dict[str, Source]  # the configured drafter first, then others to price too
    audio: np.ndarray  # real speech: the drafters must draft on it
    language: str | None
    options: DecodeOptions
    kmax: int = 16
    offsets: Sequence[int] = (0, 32, 64)
    repeats: int = 5
    warmup: int = 1
    decodes: int = 3
    niceness: Sequence[int] = (0, 19)
    lengths: Sequence[float] = LENGTHS
    job_repeats: int = 3
    rounds: int = 8  # of the contention measurements, per drafter and niceness
    limit_s: float = 40.0  # past this, no further round starts (after three)
    seed: int = 0
    say: Callable[[str], None] = lambda message: None
    # each source's bridge to the target (by name), resolved once when the measurement is set up
    bridges: dict[str, BridgeFactory] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.bridges = {name: resolve_bridge(source, self.target) for name, source in self.sources.items()}

    @property
    def full(self) -> float:
        """The audio length of the concurrent measurements: the longest measured."""
        return max(self.lengths)

    def request(self, seconds: float, language: str | None = "same") -> Request:
        return calibration_request(self.audio, seconds, self.language if language == "same" else language)

    def run(self) -> dict:
        """Measure everything (see the module docstring); returns the JSON-ready body."""
        rng = random.Random(self.seed)
        opts, target = self.options, self.target
        body: dict = {}
        if self.language is None:  # measure with the language named, as the calibration audio's is detected
            session = target.prepare(self.request(self.full, None), opts.target_threads)
            self.language = session.language
            session.close()
        full = self.request(self.full)
        first_name, first_source = next(iter(self.sources.items()), (None, None))
        self.say("real decodes (loop residuals)")
        target_only = [run_request(full, target, None, "target-only", opts) for _ in range(self.decodes + 1)][1:]
        reference = target_only[0].tokens
        loops = [x for x in map(loop_residual, target_only) if x is not None]
        episodes = {name: [run_request(full, target, source, "as2d", opts, bridge=self.bridges[name])
                           for _ in range(self.decodes + 1)][1:] for name, source in self.sources.items()}
        runs = episodes.get(first_name, [])
        as2d_loops = [x for x in map(loop_residual, runs) if x is not None]
        body["real_calls_s"] = {"target-only": calls_by_width(target_only, "target-only decode steps")}
        if runs:
            body["real_calls_s"]["as2d"] = calls_by_width(runs, "as2d decode calls")
        body["prepare_s"] = self._prepare_alone()
        session = target.prepare(full, opts.target_threads)
        language = session.language
        try:
            sequence = [session.first_token(), *continuation(session, max(self.offsets) + self.kmax + 1,
                                                             reference[1:])]
            self.say(f"target verification alone, K=1..{self.kmax}")
            alone = verify_sweep(session, sequence, self.widths, self.offsets, self.repeats, self.warmup, rng)
            body["verify_s"] = {"alone": pool(alone, self.widths, "verification alone")}
            body["verify_by_offset_s"] = {"alone": by_offset(alone)}
            # the sweep's calls (each cut back) and a decode's steps (its cache growing) ran a tenth apart on a
            # 2-core machine, either way: the real steps set the level, the sweep the shape across widths
            body["sweep_scale"] = (body["real_calls_s"]["target-only"]["1"]["median"]
                                   / body["verify_s"]["alone"]["1"]["median"])
            drafters = {}
            for name, source in self.sources.items():
                drafters[name] = drafter_costs(self, name, source, session, sequence, language, rng)
                at = drafters[name]["niceness"][str(self._nice_of(opts.drafter_nice))]
                at["episodes"] = episode_slowdowns(episodes[name], target_only, drafters[name], self.full)
            body["drafters"] = drafters
        finally:
            session.close()
        if first_source is not None:  # the configured drafter at its niceness, as earlier profiles gave it
            name = next(iter(self.sources))
            mine = drafters[name]["niceness"][str(self._nice_of(opts.drafter_nice))]
            body["verify_s"]["shared"] = mine["verify_s"]
            fit = drafters[name]["piece_s"]
            step = fit["per_token"] or fit["next"]
            body["draft_step_s"] = {"alone": step, "shared": step * mine["drafter_slowdown"]["verify"]}
            body["publish_s"] = drafters[name]["publish_s"]
            body["slowdown"] = {"verify_shared_over_alone": {
                str(k): body["verify_s"]["shared"][str(k)]["median"] / body["verify_s"]["alone"][str(k)]["median"]
                for k in self.widths}}
        if runs:  # the scheduler's rule: up to which batch drafting pays (``batching``)
            self.say("window-group calls by batch size, then whole waves of copies of the calibration request")
            waves = WaveDecodes(target, first_source, self.bridges[first_name], opts, reference)
            batch = batch_section(target, full, opts.target_threads, sequence, runs, target_only, body.get("slowdown"),
                                  self.repeats, self.warmup, waves)
            if batch is not None:
                body["batch_s"] = batch
        body["loop_s"] = stat(loops, "the target-only decode loop")
        if as2d_loops:
            body["loop_shared_s"] = stat(as2d_loops, "the as2d decode loop")
        body["r_k_pct"] = r_of_k(body["verify_s"]["alone"])
        body["calibration"] = {"request": full.request_id, "language": language, "reference_tokens": len(reference),
                               "target_only_tps": [r.tps for r in target_only],
                               "target_only_e2e_s": [r.e2e_s for r in target_only]}
        return body

    @property
    def widths(self) -> list[int]:
        return list(range(1, self.kmax + 1))

    def _nice_of(self, wanted: int) -> int:
        """The measured niceness nearest to ``wanted``."""
        return min(self.niceness, key=lambda n: (abs(n - wanted), n))

    def _prepare_alone(self) -> dict:
        """The target's preparation alone by audio length (language named), a line through it, and what
        detecting the language adds. Five of the lengths are swept in turn, ``job_repeats`` times, so a
        drift of the machine's speed touches every length alike (the line needs no more)."""
        threads = self.options.target_threads
        self.say(f"target preparation alone at {len(spread(self.lengths, 5))} audio lengths")
        time_prepare(self.target, self.request(self.full), threads)  # warm-up
        samples: dict[float, list[float]] = {s: [] for s in spread(self.lengths, 5)}
        for _ in range(self.job_repeats):
            for s in samples:
                samples[s].append(time_prepare(self.target, self.request(s), threads))
        out = {"alone": {f"{s:g}": stat(v, f"the target's preparation of {s:g} s") for s, v in samples.items()},
               "line": theil_sen([(s, x) for s, v in samples.items() for x in v])}
        try:
            detect = [time_prepare(self.target, self.request(self.full, None), threads)
                      for _ in range(max(3, self.job_repeats))]
        except Exception as exc:  # a target that cannot detect a language: requests must name one
            out["detect_missing"] = f"{type(exc).__name__}: {exc}"
        else:
            again = [time_prepare(self.target, self.request(self.full), threads) for _ in range(len(detect))]
            out["detect_extra"] = max(0.0, statistics.median(detect) - statistics.median(again))
        return out
