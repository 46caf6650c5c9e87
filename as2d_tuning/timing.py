"""Timing one thing at a time through the contracts: a preparation, a sweep of verification widths, a
drafter's whole job, a publication, and the target's calls and loop in a real decode.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from as2d_core.contracts import Request, Source, Target
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.events import TARGET_KINDS

from .stats import stat


FILLER = ("And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
          "country. The quick brown fox jumps over the lazy dog while the band plays on in the rain. ")


def calibration_request(audio: np.ndarray, seconds: float, language: str | None, name: str = "calibration") -> Request:
    """The first ``seconds`` of ``audio`` (repeated when shorter) as one request."""
    samples = int(round(seconds * 16_000))
    clip = np.resize(np.asarray(audio, dtype=np.float32), samples) if samples > audio.size else audio[:samples]
    return Request(request_id=f"{name}-{seconds:g}s", audio=clip, language=language)


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


def verify_sweep(session, sequence: list[int], widths: Sequence[int], offsets: Sequence[int], repeats: int,
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


def publish_cost(size: int, count: int = 200) -> list[float]:
    buffer = CandidateBuffer("profile", "profile", "profile")
    out = []
    for i in range(count):
        start = time.perf_counter()
        buffer.publish(list(range(i, i + size)))
        out.append(time.perf_counter() - start)
    return out


def loop_residual(result) -> float | None:
    """Decode clock minus target time, per target round, on one real decode."""
    rounds = result.verify_calls + result.target_only_steps
    d = result.decomposition
    if not rounds or d is None:
        return None
    target_time = sum(e.end - e.start for e in result.events if e.kind in TARGET_KINDS)
    return (result.decode_s - target_time) / rounds


def calls_by_width(results, what: str) -> dict:
    """Seconds of the target's calls in real decodes, by physical width (widths with 3 calls or more)."""
    calls: dict[int, list[float]] = {}
    for result in results:
        for e in result.events:
            if e.kind in TARGET_KINDS and e.width:
                calls.setdefault(e.width, []).append(e.end - e.start)
    return {str(k): stat(v, f"{what} K={k}") for k, v in sorted(calls.items()) if len(v) >= 3}
