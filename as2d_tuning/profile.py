"""Measuring a device profile on the configured backends (Appendix B.2, D.2.1, D.2.2).

Everything goes through the Target/Source contracts, so any backend plugin (and a drafter in
its own process) is profiled the same way, and the costs are those of what the engine does:

- the target's preparation (audio encoding, language, prompt prefill) alone, by audio length,
  and beside a drafter drafting from arrival at each niceness: their ratio is how much drafting
  from arrival slows the target's preparation;
- target verification at every physical width K = 1..Kmax at several prefix offsets: the cache
  is filled with a known continuation up to the offset, a width-K call appends root + K-1 known
  tokens and is cut back; each (offset, K) is measured ``repeats`` times after ``warmup``
  untimed calls, widths shuffled per repeat so slow drifts touch all widths alike. Once alone
  (the target's full threads) and, for each drafter and niceness, on the shared threads with
  the drafter drafting beside it (the engine's threads while drafting);
- each drafter's whole jobs (its encoder in ``prepare``, then every piece with its bridge
  conversion, then the call that finds the job over) on real speech cut to several lengths,
  alone; a piece's cost is fitted as a fixed part plus a part per token. Then, at each
  niceness, in a fresh thread at that niceness as the engine's producer is, in rounds that take
  each in turn (so a drift of a shared machine touches all alike): the target's preparation
  alone and beside the drafter, and the drafter's job alone, beside the target's preparation
  and beside its verification: the slowdowns the replay applies;
- the residual loop cost per target round: decode clock minus target time, over rounds, in
  real target-only and as2d decodes; and one publication;
- from the real decodes too: the target's own steps, which set the level of the width sweep
  (``sweep_scale``), and each drafter's slowdowns as the engine runs it at the configured niceness
  (``episodes``), which the replay prefers to the contention rounds'.

A measurement that collects no sample is a :class:`ProfileError` naming it. Medians are kept
with their spread (quartiles, standard deviation, n).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import platform
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np

from as2d_bench.machine import bench_machine, machine_info, package_versions  # noqa: F401  (also imported from here)
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.setup.catalog import resolve_bridge
from as2d_core.contracts import BridgeFactory, Request, Source, Target
from as2d_core.decode.request import run_request
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.source_spec import SourceSpec
from as2d_core.decode.events import TARGET_KINDS
from as2d_core.workers.priority import lower_thread_priority, run_at_lower_priority
from .costs import FORMAT, interpolate

FILLER = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
          "country. The quick brown fox jumps over the lazy dog while the band plays on in the rain. ")
# Audio lengths (s) the preparation and the drafters are measured at: the CTranslate2 drafter's encoder
# input changes where a clip starts to be chunked (10 s, 20 s), so both sides of each step are measured.
LENGTHS = (1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 11.0, 13.0, 16.0, 20.0, 21.0, 25.0, 30.0)
# Packages whose code decides what a profile measures; their sources are hashed into the profile.
CODE_PACKAGES = ("as2d_core", "tokenizer_bridges")


class ProfileError(ValueError):
    """A measurement collected no sample; the message names what did not run."""


def stat(samples: Sequence[float], what: str = "samples") -> dict:
    """Median with its spread; the mean and standard deviation feed R(K) as in Figure 8."""
    xs = sorted(samples)
    if not xs:
        raise ProfileError(f"no sample of {what} was measured")
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "mean": statistics.fmean(xs),
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": xs[0], "max": xs[-1], "n": len(xs)}


def model_version(models_dir: Path, name: str) -> dict:
    """A model folder's identity: hash of its metadata and the sizes of its files (weights not re-read)."""
    folder = Path(models_dir) / SourceSpec.parse(name).name
    if not folder.is_dir():
        return {"name": name, "folder": None}
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    meta = folder / "model.json"
    digest = hashlib.sha256(meta.read_bytes() if meta.exists() else repr(files).encode()).hexdigest()[:16]
    return {"name": name, "folder": str(folder), "files": files, "meta_sha256_16": digest}


def code_version(packages: Sequence[str]) -> dict:
    """The code that made a profile: the as2d version and a hash of the named packages' Python sources.

    The version alone does not change from commit to commit; the hash does, so ``as2d replay`` can
    tell a profile made by other code.
    """
    digest = hashlib.sha256()
    hashed = []
    for name in sorted(set(packages)):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(next(iter(spec.submodule_search_locations)))
        hashed.append(name)
        for path in sorted(folder.rglob("*.py")):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    try:
        version = importlib.metadata.version("as2d")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"as2d": version, "packages": hashed, "sha256_16": digest.hexdigest()[:16]}


def part_packages(*parts) -> list[str]:
    """The top-level packages whose code runs a target or source (a drafter in its own process: the core's)."""
    return [*CODE_PACKAGES, *(type(p).__module__.split(".")[0] for p in parts if p is not None)]


def _same_kind(a: dict, b: dict) -> bool:
    """Two machines time alike: same CPU model and usable cores (and architecture, where both say); a
    machine described by its host name only is that host."""
    if not (a.get("cpu") and b.get("cpu")):
        return bool(a.get("hostname")) and a.get("hostname") == b.get("hostname")
    keys = ["cpu", "cores"] + (["arch"] if a.get("arch") and b.get("arch") else [])
    return all(a.get(k) == b.get(k) for k in keys)


def _traced_machines(paths: Sequence[Path]) -> list[dict]:
    """The machines that ran these traces, from the bench rows beside them (``results.jsonl``)."""
    import json

    machines = {}
    for path in paths:
        results = (Path(path) if Path(path).is_dir() else Path(path).parent) / "results.jsonl"
        if results.is_file():
            for line in results.read_text().splitlines():
                machine = json.loads(line).get("machine") if line.strip() else None
                if machine:
                    machines[machine.get("kind") or repr(sorted(machine.items()))] = machine
    return list(machines.values())


def staleness(profile: dict, trace_paths: Sequence[Path] = ()) -> tuple[list[str], bool]:
    """Why ``profile`` may misprice these traces, and whether it was made on the kind of machine that ran them.

    It warns of a profile made on another kind of machine (than the traces', else this one), by
    other code (the hash of the core's and the parts' sources), or on other models than those
    installed here.
    """
    from as2d_core.setup.paths import models_dir

    warnings = []
    made = profile.get("machine") or {}
    ran = _traced_machines(trace_paths)
    where = "the machine that ran the traces" if ran else "this machine"
    same = bool(made) and all(_same_kind(made, m) for m in (ran or [bench_machine()]))
    if not same:
        warnings.append(f"the profile was made on another machine ({made.get('cpu') or '?'}, {made.get('cores')} "
                        f"cores) than {where}: its costs are that machine's")
    code = profile.get("code")
    if not code:
        warnings.append("the profile does not say which code made it (it predates code versions): "
                        "run as2d profile again")
    elif code_version(code.get("packages", CODE_PACKAGES))["sha256_16"] != code.get("sha256_16"):
        warnings.append(f"the profile was made by other code ({', '.join(code.get('packages', []))} changed "
                        "since): run as2d profile again")
    models = profile.get("models") or {}
    for name, then in [("target", models.get("target")), *(models.get("sources") or {}).items()]:
        if then and then.get("folder"):
            now = model_version(models_dir(), then["name"])
            if now.get("folder") and (now["meta_sha256_16"], now["files"]) != (then["meta_sha256_16"], then["files"]):
                warnings.append(f"the profile was made with another {then['name']} than the one installed here")
    return warnings, same


def continuation(session, length: int, reference: Sequence[int]) -> list[int]:
    """A known target-reference continuation of ``length`` tokens: the greedy response, then filler text."""
    tokens = [t for t in reference if t != session.eos_token]
    try:
        filler = session.encode_text(FILLER)
    except Exception:  # a target without a text encoder: any valid ids have the same cost
        filler = []
    filler = filler or tokens or [session.first_token()]
    while len(tokens) < length:
        tokens.extend(filler)
    return tokens[:length]


def spread(values: Sequence[float], count: int) -> list[float]:
    """At most ``count`` of the sorted ``values``, evenly spread, the first and last included."""
    values = sorted(values)
    if len(values) <= count:
        return values
    return sorted({values[round(i * (len(values) - 1) / (count - 1))] for i in range(count)})


def calibration_request(audio: np.ndarray, seconds: float, language: str | None, name: str = "calibration") -> Request:
    """The first ``seconds`` of ``audio`` (repeated when shorter) as one request."""
    samples = int(round(seconds * 16_000))
    clip = np.resize(np.asarray(audio, dtype=np.float32), samples) if samples > audio.size else audio[:samples]
    return Request(request_id=f"{name}-{seconds:g}s", audio=clip, language=language)


class _Background(threading.Thread):
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

    def __enter__(self) -> "_Background":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(60)


def _verify_sweep(session, sequence: list[int], widths: Sequence[int], offsets: Sequence[int], repeats: int,
                  warmup: int, rng: random.Random) -> dict[int, dict[int, list[float]]]:
    """Seconds of width-K calls at each prefix offset: {offset: {K: [samples]}}."""
    out: dict[int, dict[int, list[float]]] = {}
    for offset in offsets:
        session.truncate(0)
        if offset:
            session.verify(sequence[0], sequence[1:offset])
        root = sequence[offset]
        samples: dict[int, list[float]] = {k: [] for k in widths}
        for rep in range(warmup + repeats):
            order = list(widths)
            rng.shuffle(order)
            for k in order:
                candidates = sequence[offset + 1: offset + k]
                start = time.perf_counter()
                session.verify(root, candidates)
                elapsed = time.perf_counter() - start
                session.truncate(offset)
                if rep >= warmup:
                    samples[k].append(elapsed)
        out[offset] = samples
    return out


def time_prepare(target: Target, request: Request, threads: int) -> float:
    """Seconds of one target preparation (audio encoding, language, prompt prefill), session closed after."""
    start = time.perf_counter()
    session = target.prepare(request, threads)
    elapsed = time.perf_counter() - start
    session.close()
    return elapsed


@attrs.frozen
class JobTiming:
    """One drafter job as the engine's producer runs it: ``prepare``, each piece (with its bridge
    conversion) and the call that finds the job over."""

    audio_s: float
    prepare_s: float
    pieces: tuple[tuple[float, int], ...]  # (seconds, drafter tokens)
    end_s: float

    @property
    def total_s(self) -> float:
        return self.prepare_s + sum(s for s, _ in self.pieces) + self.end_s


def time_job(source: Source, bridge: Callable, request: Request, language: str, threads: int,
             stop: threading.Event | None = None) -> JobTiming:
    """One whole job of ``source`` on ``request`` (``bridge()``: a fresh bridge for it)."""
    start = time.perf_counter()
    job = source.prepare(request, language, threads)
    prepare_s = time.perf_counter() - start
    converter = bridge()
    pieces: list[tuple[float, int]] = []
    end_s = 0.0
    try:
        stream = iter(job.pieces())
        while stop is None or not stop.is_set():
            start = time.perf_counter()
            piece = next(stream, None)
            if piece is None:
                end_s = time.perf_counter() - start
                break
            converter.push(piece.tokens, piece.confidences)
            pieces.append((time.perf_counter() - start, len(piece.tokens)))
    finally:
        job.close()
    return JobTiming(request.duration_s, prepare_s, tuple(pieces), end_s)


def fit_pieces(jobs: Sequence[JobTiming], what: str) -> dict:
    """A piece's seconds as ``first`` (a job's first piece) or ``next`` (a later one) plus ``per_token`` x its tokens.

    A job's first piece carries the prompt's prefill (one token a step) or a chunk's whole decode;
    a later one may carry the next chunk's encoding. Each piece of a job (its audio length and its
    place) is taken at its median over the repeats, so a cold first call or a burst of load on a
    shared machine moves nothing; a least-squares line with one intercept for first pieces and one for
    later ones then goes through those medians. When all pieces have one token the per-token part cannot
    be told apart and is folded into the fixed parts. ``end`` is the call that found the job over (the
    forward that produced the end token).
    """
    places: dict[tuple[float, int], list[tuple[float, int]]] = {}
    for job in jobs:
        for index, (seconds, tokens) in enumerate(job.pieces):
            places.setdefault((round(job.audio_s, 3), index), []).append((seconds, tokens))
    if not places:
        raise ProfileError(f"{what} drafted no token: give --audio with speech in a language it drafts")
    pieces = [(index > 0, statistics.median(s for s, _ in v), statistics.median(n for _, n in v))
              for (_, index), v in sorted(places.items())]
    later = any(is_later for is_later, _, _ in pieces)
    per_token = 0.0
    if len({n for _, _, n in pieces}) > 1:
        rows = np.array([[not is_later, is_later, n] if later else [1.0, n] for is_later, _, n in pieces], dtype=float)
        coef, *_ = np.linalg.lstsq(rows, np.array([s for _, s, _ in pieces]), rcond=None)
        per_token = max(0.0, float(coef[-1]))
    fixed = {kind: [s - per_token * n for is_later, s, n in pieces if is_later == kind] for kind in (False, True)}
    fixed_first = statistics.median(fixed[False]) if fixed[False] else 0.0
    fixed_next = statistics.median(fixed[True]) if fixed[True] else fixed_first
    error = [abs((fixed_next if is_later else fixed_first) + per_token * n - s) / s for is_later, s, n in pieces if s > 0]
    return {"first": max(0.0, fixed_first), "next": max(0.0, fixed_next), "per_token": per_token,
            "end": statistics.median(job.end_s for job in jobs), "pieces": sum(len(j.pieces) for j in jobs),
            "tokens": sum(n for j in jobs for _, n in j.pieces),
            "median_abs_error_pct": 100 * statistics.median(error) if error else 0.0}


def theil_sen(points: Sequence[tuple[float, float]]) -> dict:
    """A line through noisy (x, y) points that one slow sample cannot tilt: the median of pairwise slopes,
    then the median intercept."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    return {"intercept": statistics.median(y - slope * x for x, y in points), "slope": slope}


def _publish_cost(size: int, count: int = 200) -> list[float]:
    buffer = CandidateBuffer("profile", "profile", "profile")
    out = []
    for i in range(count):
        start = time.perf_counter()
        buffer.publish(list(range(i, i + size)))
        out.append(time.perf_counter() - start)
    return out


def _loop_residual(result) -> float | None:
    """Decode clock minus target time, per target round, on one real decode."""
    rounds = result.verify_calls + result.target_only_steps
    d = result.decomposition
    if not rounds or d is None:
        return None
    target_time = sum(e.end - e.start for e in result.events if e.kind in TARGET_KINDS)
    return (result.decode_s - target_time) / rounds


def _calls_by_width(results, what: str) -> dict:
    """Seconds of the target's calls in real decodes, by physical width (widths with 3 calls or more)."""
    calls: dict[int, list[float]] = {}
    for result in results:
        for e in result.events:
            if e.kind in TARGET_KINDS and e.width:
                calls.setdefault(e.width, []).append(e.end - e.start)
    return {str(k): stat(v, f"{what} K={k}") for k, v in sorted(calls.items()) if len(v) >= 3}


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


def _pool(samples: dict[int, dict[int, list[float]]], widths, what: str) -> dict:
    return {str(k): stat([x for per in samples.values() for x in per[k]], f"{what} K={k}") for k in widths}


def _by_offset(samples: dict[int, dict[int, list[float]]]) -> dict:
    return {str(o): {str(k): statistics.median(v) for k, v in per.items()} for o, per in samples.items()}


def _ratio(beside: Sequence[float], alone: Sequence[float], what: str) -> float:
    return stat(beside, f"{what} beside")["median"] / stat(alone, f"{what} alone")["median"]


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
        loops = [x for x in map(_loop_residual, target_only) if x is not None]
        episodes = {name: [run_request(full, target, source, "as2d", opts, bridge=self.bridges[name])
                           for _ in range(self.decodes + 1)][1:] for name, source in self.sources.items()}
        runs = episodes.get(first_name, [])
        as2d_loops = [x for x in map(_loop_residual, runs) if x is not None]
        body["real_calls_s"] = {"target-only": _calls_by_width(target_only, "target-only decode steps")}
        if runs:
            body["real_calls_s"]["as2d"] = _calls_by_width(runs, "as2d decode calls")
        body["prepare_s"] = self._prepare_alone()
        session = target.prepare(full, opts.target_threads)
        language = session.language
        try:
            sequence = [session.first_token(), *continuation(session, max(self.offsets) + self.kmax + 1,
                                                             reference[1:])]
            self.say(f"target verification alone, K=1..{self.kmax}")
            alone = _verify_sweep(session, sequence, self.widths, self.offsets, self.repeats, self.warmup, rng)
            body["verify_s"] = {"alone": _pool(alone, self.widths, "verification alone")}
            body["verify_by_offset_s"] = {"alone": _by_offset(alone)}
            # the sweep's calls (each cut back) and a decode's steps (its cache growing) ran a tenth apart on a
            # 2-core machine, either way: the real steps set the level, the sweep the shape across widths
            body["sweep_scale"] = (body["real_calls_s"]["target-only"]["1"]["median"]
                                   / body["verify_s"]["alone"]["1"]["median"])
            drafters = {}
            for name, source in self.sources.items():
                drafters[name] = self._drafter(name, source, session, sequence, language, rng)
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

    def _drafter(self, name: str, source: Source, session, sequence: list[int], language: str,
                 rng: random.Random) -> dict:
        """Everything one drafter costs alone and what it and the target do to each other, per niceness."""
        opts, target = self.options, self.target
        threads = opts.drafter_threads

        def bridge():
            return self.bridges[name](source, target, session)

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

        self.say(f"{name}: whole jobs alone at {len(self.lengths)} audio lengths")
        alone = jobs([self.request(s) for _ in range(self.job_repeats) for s in self.lengths])
        fit = fit_pieces(alone, f"drafter {name}")
        out = {
            "prepare_s": {f"{s:g}": stat([j.prepare_s for j in alone if abs(j.audio_s - s) < 1e-3],
                                         f"{name}'s encoder at {s:g} s") for s in self.lengths},
            "piece_s": fit,
            "publish_s": stat(_publish_cost(opts.publication_size), "a publication"),
            "niceness": {},
        }
        full = self.request(self.full)
        full_copy = calibration_request(self.audio, self.full, self.language, "beside")  # its own log-mel

        def prepare_loop(stop):
            time_prepare(target, full_copy, opts.target_threads)

        def verify_loop(stop):  # the target verifying width 8 on its shared threads, as while drafting
            _verify_sweep(session, sequence, [8], [0], 1, 0, rng)

        def drafter_loop(stop):
            time_job(source, bridge, full_copy, language, threads, stop)

        for nice in self.niceness:
            self.say(f"{name} at niceness {nice}: beside the target's preparation and verification")
            jobs([full], nice)  # the runtime at this niceness, warmed
            taken: dict[str, list[float]] = {k: [] for k in ("alone", "prepare", "verify", "target", "target beside")}
            started = time.perf_counter()
            for rounds in range(1, self.rounds + 1):  # each kind in turn, so a drift touches all of them alike
                taken["target"].append(time_prepare(target, full, opts.target_threads))
                with _Background(drafter_loop, nice) as load:
                    taken["target beside"].append(time_prepare(target, full, opts.target_threads))
                self._check(load, f"drafter {name} at niceness {nice}")
                taken["alone"] += [j.total_s for j in jobs([full], nice, warm=False)]
                with _Background(prepare_loop) as load:
                    taken["prepare"] += [j.total_s for j in jobs([full], nice, warm=False)]
                self._check(load, f"the target's preparation beside {name}")
                session.use_threads(opts.shared_target_threads)
                with _Background(verify_loop) as load:
                    taken["verify"] += [j.total_s for j in jobs([full], nice, warm=False)]
                self._check(load, f"the target's verification beside {name}")
                if rounds >= 3 and time.perf_counter() - started > self.limit_s:
                    break  # a niced drafter on a busy machine can crawl: fewer rounds, not an endless profile
            with _Background(drafter_loop, nice) as load:
                shared = _verify_sweep(session, sequence, self.widths, self.offsets, self.repeats, self.warmup, rng)
            self._check(load, f"drafter {name} at niceness {nice}")
            session.use_threads(opts.target_threads)
            out["niceness"][str(nice)] = {
                "verify_s": _pool(shared, self.widths, f"verification beside {name}"),
                "prepare_beside_s": stat(taken["target beside"], f"the target's preparation beside {name}"),
                "target_slowdown": {"prepare": _ratio(taken["target beside"], taken["target"],
                                                      "the target's preparation")},
                "drafter_slowdown": {kind: _ratio(taken[kind], taken["alone"], f"{name}'s job")
                                     for kind in ("prepare", "verify")},
                "rounds": rounds,
            }
        return out

    @staticmethod
    def _check(load: _Background, what: str) -> None:
        if load.error is not None:
            raise ProfileError(f"{what} failed while it was measured: {load.error}")


def r_of_k(verify: dict) -> dict:
    """Equation (2): per-position saving 100(1 - V(K)/(K V(1))) from mean call times, with error bars
    100 s_K / (K V(1)) (Appendix B.2)."""
    base = verify["1"].get("mean", verify["1"]["median"])
    out = {}
    for key, s in verify.items():
        k = int(key)
        mean = s.get("mean", s["median"])
        out[key] = {"r_pct": 100 * (1 - mean / (k * base)), "err_pct": 100 * s.get("stdev", 0.0) / (k * base)}
    return out


def build_profile(config, measurement: Measurement, models_dir: Path | None = None) -> dict:
    """A complete profile file for ``config`` (a validated :class:`as2d_core.setup.config.Config`)."""
    started = time.perf_counter()
    body = measurement.run()
    target = measurement.target
    names = list(measurement.sources)
    header = {
        "format": FORMAT,
        "name": (config.device_profile or {}).get("name", platform.node()),
        "description": (config.device_profile or {}).get("description"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": round(time.perf_counter() - started, 1),
        "config": str(config.path),
        "machine": bench_machine(),
        "packages": package_versions(),
        "code": code_version(part_packages(target, *measurement.sources.values())),
        "target": {"model": config.target.model, "backend": config.target.backend, "device": config.target.device,
                   "threads": config.decode.target_threads, "shared_threads": config.decode.shared_target_threads,
                   "devices_in_use": _jsonable(target.device_in_use)},
        "source": None if config.source is None else {
            "name": names[0] if names else config.source.name, "backend": config.source.backend,
            "device": config.source.device, "threads": config.decode.drafter_threads,
            "publication_size": config.decode.publication_size, "process": config.source.process},
        "options": attrs.asdict(measurement.options),
        "protocol": {"widths": f"1..{measurement.kmax}", "offsets": list(measurement.offsets),
                     "repeats": measurement.repeats, "warmup": measurement.warmup,
                     "lengths_s": list(measurement.lengths), "job_repeats": measurement.job_repeats,
                     "niceness": list(measurement.niceness), "decodes": measurement.decodes,
                     "language": measurement.language,
                     "statistic": "median (q1, q3, mean, stdev, n kept)", "units": "seconds"},
        "measured": ["prepare_s.alone by audio length", "verify_s.alone K1..%d" % measurement.kmax, "loop_s"] + [
            f"drafters.{n}: jobs alone by audio length; beside the target at niceness "
            + ", ".join(map(str, measurement.niceness)) for n in names],
        "missing": [] if names else ["no source configured: no drafter or concurrent costs"],
    }
    if "detect_missing" in body["prepare_s"]:
        header["missing"].append(f"language detection: {body['prepare_s']['detect_missing']}")
    if models_dir is not None:
        header["models"] = {"target": model_version(models_dir, config.target.model),
                            "sources": {n: model_version(models_dir, n) for n in names}}
    header["duration_s"] = round(time.perf_counter() - started, 1)
    return {**header, **body}


def _jsonable(value):
    try:
        import json

        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def plot_r_of_k(profiles: dict[str, dict], path: Path) -> None:
    """Figure 8: per-token verification saving R(K) against width, one bar series per profile."""
    from as2d_bench.report import saved_figure

    with saved_figure(path, (7, 3.5)) as ax:
        n = len(profiles)
        for i, (name, profile) in enumerate(profiles.items()):
            r = profile.get("r_k_pct") or r_of_k(profile["verify_s"]["alone"])
            ks = sorted(int(k) for k in r if int(k) > 1)
            x = np.array(ks) + (i - (n - 1) / 2) * (0.8 / n)
            ax.bar(x, [r[str(k)]["r_pct"] for k in ks], width=0.8 / n, yerr=[r[str(k)]["err_pct"] for k in ks],
                   capsize=2, label=name)
        ax.set_xlabel("physical verification width K")
        ax.set_ylabel("R(K), saving per position (%)")
        ax.set_title("Per-token verification saving relative to K=1 (eq. 2)")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
