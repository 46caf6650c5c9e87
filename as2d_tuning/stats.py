"""The statistics of a profile: medians with their spread, robust lines, the drafter's piece fit, R(K).

Kept apart from the measuring so each rule can be checked on numbers alone.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .timing import JobTiming


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


def spread(values: Sequence[float], count: int) -> list[float]:
    """At most ``count`` of the sorted ``values``, evenly spread, the first and last included."""
    values = sorted(values)
    if len(values) <= count:
        return values
    return sorted({values[round(i * (len(values) - 1) / (count - 1))] for i in range(count)})


def theil_sen(points: Sequence[tuple[float, float]]) -> dict:
    """A line through noisy (x, y) points that one slow sample cannot tilt: the median of pairwise slopes,
    then the median intercept."""
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:] if x2 != x1]
    slope = statistics.median(slopes) if slopes else 0.0
    return {"intercept": statistics.median(y - slope * x for x, y in points), "slope": slope}


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


def pool(samples: dict[int, dict[int, list[float]]], widths, what: str) -> dict:
    return {str(k): stat([x for per in samples.values() for x in per[k]], f"{what} K={k}") for k in widths}


def by_offset(samples: dict[int, dict[int, list[float]]]) -> dict:
    return {str(o): {str(k): statistics.median(v) for k, v in per.items()} for o, per in samples.items()}


def ratio(beside: Sequence[float], alone: Sequence[float], what: str) -> float:
    return stat(beside, f"{what} beside")["median"] / stat(alone, f"{what} alone")["median"]
