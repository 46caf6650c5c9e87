"""Measuring a device profile on the configured backends (Appendix B.2, D.2.1, D.2.2).

Everything goes through the Target/Source contracts, so any backend plugin is
profiled the same way:

- target verification at every physical width K = 1..Kmax at several prefix
  offsets: the cache is filled with a known continuation up to the offset, a
  width-K call appends root + K-1 known tokens and is cut back; each (offset, K)
  is measured ``repeats`` times after ``warmup`` untimed calls, widths shuffled
  per repeat so slow drifts touch all widths alike. Once alone (the target's
  full threads) and once with the drafter decoding on its own thread (the
  shared threads the engine uses while drafting): their ratio is the
  concurrent slowdown;
- the drafter's forward (with bridge conversion) alone and while the target
  verifies, and the cost of one publication;
- the residual loop cost per target round: decode clock minus target time,
  over rounds, in real target-only and as2d decodes.

Medians are kept with their spread (quartiles, standard deviation, n).
"""
from __future__ import annotations

import hashlib
import platform
import random
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_bench.machine import machine_info, package_versions  # noqa: F401  (also imported from here)
from as2d_core.buffer import CandidateBuffer
from as2d_core.contracts import Request, Source, Target
from as2d_core.engine import DecodeOptions, run_request
from as2d_core.events import TARGET_KINDS
from .costs import FORMAT

FILLER = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
          "country. The quick brown fox jumps over the lazy dog while the band plays on in the rain. ")


def stat(samples: Sequence[float]) -> dict:
    """Median with its spread; the mean and standard deviation feed R(K) as in Figure 8."""
    xs = sorted(samples)
    q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "mean": statistics.fmean(xs),
            "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": xs[0], "max": xs[-1], "n": len(xs)}


def model_version(models_dir: Path, name: str) -> dict:
    """A model folder's identity: hash of its metadata and the sizes of its files (weights not re-read)."""
    folder = Path(models_dir) / name
    if not folder.is_dir():
        return {"name": name, "folder": None}
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    meta = folder / "model.json"
    digest = hashlib.sha256(meta.read_bytes() if meta.exists() else repr(files).encode()).hexdigest()[:16]
    return {"name": name, "folder": str(folder), "files": files, "meta_sha256_16": digest}


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


class _Background(threading.Thread):
    """Runs ``work(stop)`` in a loop for the duration of a ``with`` block: the other model keeping its core busy.

    As a context manager it is started on entry and stopped and joined on exit, also when the
    measurement inside raises, so every concurrent measurement shares one start/stop protocol.
    """

    def __init__(self, work) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.work(self.stop)

    def __enter__(self) -> "_Background":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(10)


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


def _draft_steps(source: Source, target_session, target, request: Request, language: str, threads: int,
                 count: int, stop: threading.Event | None = None, min_samples: int = 5) -> list[float]:
    """Seconds per drafted token incl. bridge conversion, one sample per piece, until ``count`` tokens
    and at least ``min_samples`` pieces.

    The first piece of a job (which carries the prompt prefill) is excluded. A piece of
    several tokens (a drafter that decodes many steps in one native call, as the
    CTranslate2 Whisper drafter does) counts its time spread over its tokens.
    """
    from as2d_core.catalog import bridge_for

    times: list[float] = []
    tokens = 0

    def wanted() -> bool:
        enough = tokens >= count and len(times) >= min(min_samples, count)
        return not enough and not (stop is not None and stop.is_set())

    while wanted():
        job = source.prepare(request, language, threads)
        bridge = bridge_for(source, target, target_session)
        pieces = iter(job.pieces())
        first, before = True, tokens
        try:
            while wanted():
                start = time.perf_counter()
                piece = next(pieces, None)
                if piece is None:
                    break
                bridge.push(piece.tokens, piece.confidences)
                if not first and piece.tokens:
                    times.append((time.perf_counter() - start) / len(piece.tokens))
                    tokens += len(piece.tokens)
                first = False
        finally:
            job.close()
        if tokens == before:  # the drafter produced nothing past its first piece on this audio
            break
    return times


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


def measure(target: Target, source: Source | None, request: Request, *, options: DecodeOptions, kmax: int = 16,
            offsets: Sequence[int] = (0, 32, 64), repeats: int = 5, warmup: int = 1, decodes: int = 3,
            seed: int = 0, other_sources: dict[str, Source] | None = None) -> dict:
    """Measure one profile (see the module docstring); returns the JSON-ready body."""
    rng = random.Random(seed)
    widths = list(range(1, kmax + 1))
    # Real decodes: reference continuation and loop residuals (one warm-up each).
    target_only = [run_request(request, target, None, "target-only", options) for _ in range(decodes + 1)][1:]
    reference = target_only[0].tokens
    loops = [x for x in map(_loop_residual, target_only) if x is not None]
    as2d_loops = []
    if source is not None:
        runs = [run_request(request, target, source, "as2d", options) for _ in range(decodes + 1)][1:]
        as2d_loops = [x for x in map(_loop_residual, runs) if x is not None]

    session = target.prepare(request, options.target_threads)
    language = session.language
    body: dict = {}
    try:
        sequence = [session.first_token(), *continuation(session, max(offsets) + kmax + 1, reference[1:])]
        alone = _verify_sweep(session, sequence, widths, offsets, repeats, warmup, rng)
        body["verify_s"] = {"alone": _pool(alone, widths)}
        body["verify_by_offset_s"] = {"alone": _by_offset(alone)}
        if source is not None:
            session.use_threads(options.shared_target_threads)
            def target_busy(stop):  # the target verifying width 8 while a drafter is timed
                _verify_sweep(session, sequence, [8], [0], 1, 0, rng)

            draft_alone = _draft_steps(source, session, target, request, language, options.drafter_threads, 40)
            with _Background(lambda stop: _draft_steps(source, session, target, request, language,
                                                       options.drafter_threads, 10_000, stop)):
                shared = _verify_sweep(session, sequence, widths, offsets, repeats, warmup, rng)
            session.truncate(0)
            with _Background(target_busy):
                draft_shared = _draft_steps(source, session, target, request, language, options.drafter_threads, 40)
            drafters = {}
            for name, other in (other_sources or {}).items():  # other candidate drafters, same protocol
                other_alone = _draft_steps(other, session, target, request, language, options.drafter_threads, 20)
                with _Background(target_busy):
                    other_shared = _draft_steps(other, session, target, request, language, options.drafter_threads,
                                                20)
                if other_alone and other_shared:
                    drafters[name] = {"draft_step_s": {"alone": stat(other_alone), "shared": stat(other_shared)},
                                      "publish_s": stat(_publish_cost(options.publication_size))}
            if drafters:
                body["drafters"] = drafters
            body["verify_s"]["shared"] = _pool(shared, widths)
            body["verify_by_offset_s"]["shared"] = _by_offset(shared)
            body["draft_step_s"] = {"alone": stat(draft_alone), "shared": stat(draft_shared)}
            body["publish_s"] = stat(_publish_cost(options.publication_size))
            body["slowdown"] = {
                "verify_shared_over_alone": {str(k): body["verify_s"]["shared"][str(k)]["median"]
                                             / body["verify_s"]["alone"][str(k)]["median"] for k in widths},
                "draft_shared_over_alone": body["draft_step_s"]["shared"]["median"]
                / body["draft_step_s"]["alone"]["median"],
            }
    finally:
        session.close()
    if loops:
        body["loop_s"] = stat(loops)
    if as2d_loops:
        body["loop_shared_s"] = stat(as2d_loops)
    body["r_k_pct"] = r_of_k(body["verify_s"]["alone"])
    body["calibration"] = {"request": request.request_id, "language": language, "reference_tokens": len(reference),
                           "target_only_tps": [r.tps for r in target_only]}
    return body


def _pool(samples: dict[int, dict[int, list[float]]], widths) -> dict:
    return {str(k): stat([x for per in samples.values() for x in per[k]]) for k in widths}


def _by_offset(samples: dict[int, dict[int, list[float]]]) -> dict:
    return {str(o): {str(k): statistics.median(v) for k, v in per.items()} for o, per in samples.items()}


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


def build_profile(config, target, source, request: Request, *, kmax: int, offsets, repeats: int, warmup: int,
                  decodes: int = 3, models_dir: Path | None = None, other_sources: dict | None = None) -> dict:
    """A complete profile file for ``config`` (a validated :class:`as2d_core.config.Config`)."""
    options = config.decode_options()
    body = measure(target, source, request, options=options, kmax=kmax, offsets=offsets, repeats=repeats,
                   warmup=warmup, decodes=decodes, other_sources=other_sources)
    header = {
        "format": FORMAT,
        "name": (config.device_profile or {}).get("name", platform.node()),
        "description": (config.device_profile or {}).get("description"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": str(config.path),
        "machine": machine_info(),
        "packages": package_versions(),
        "target": {"model": config.target.model, "backend": config.target.backend, "device": config.target.device,
                   "threads": config.target.threads, "shared_threads": config.target.shared_threads,
                   "devices_in_use": target.device_in_use},
        "source": None if config.source is None else {
            "name": config.source.name, "backend": config.source.backend, "device": config.source.device,
            "threads": config.source.threads, "publication_size": config.source.publication_size},
        "protocol": {"widths": f"1..{kmax}", "offsets": list(offsets), "repeats": repeats, "warmup": warmup,
                     "statistic": "median (q1, q3, mean, stdev, n kept)", "units": "seconds"},
        "measured": ["verify_s.alone K1..%d" % kmax, "loop_s"] + ([
            "verify_s.shared K1..%d" % kmax, "draft_step_s", "publish_s", "loop_shared_s"] if source else []),
        "missing": [] if source else ["no source configured: no drafter or concurrent costs"],
    }
    if models_dir is not None:
        header["models"] = {"target": model_version(models_dir, config.target.model)}
        if config.source is not None:
            header["models"]["source"] = model_version(models_dir, config.source.name)
    header["target"]["devices_in_use"] = _jsonable(header["target"]["devices_in_use"])
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
