"""Monotonic stage events and the time decomposition T = D + V - O + H (Appendix D.2.7).

Every stage (a drafter step, a publication, a verification, a target-only step,
an alignment) appends one event. From the events of one run we compute, on the
decode clock: drafting time D (union of drafter spans), target time V (union of
verification and target-only spans), their overlap O, and the residual H, the
part of the clock when neither model was computing (alignment, queue work,
Python overhead, producer drain).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import attrs

DRAFT_KINDS = frozenset({"draft", "draft-prepare"})
TARGET_KINDS = frozenset({"verify", "step"})


@attrs.frozen
class Event:
    kind: str  # draft | draft-prepare | publish | verify | step | align | prefill | encode | drain
    start: float
    end: float
    tokens: int = 0
    width: int = 0  # physical verification width K (root included)


class EventLog:
    """Thread-safe, append-only list of events; times come from time.perf_counter()."""

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def add(self, kind: str, start: float, end: float | None = None, tokens: int = 0, width: int = 0) -> Event:
        event = Event(kind, start, time.perf_counter() if end is None else end, tokens, width)
        with self._lock:
            self._events.append(event)
        return event

    @property
    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return tuple(self._events)


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _clip(spans: Iterable[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@attrs.frozen
class Decomposition:
    total: float  # T, the decode clock
    drafting: float  # D
    verification: float  # V
    overlap: float  # O
    residual: float  # H

    def check(self, tolerance: float = 1e-9) -> bool:
        """T = D + V - O + H, with every part non-negative and O <= min(D, V)."""
        parts_ok = min(self.drafting, self.verification, self.overlap, self.residual) >= -tolerance
        overlap_ok = self.overlap <= min(self.drafting, self.verification) + tolerance
        identity = abs(self.total - (self.drafting + self.verification - self.overlap + self.residual))
        return parts_ok and overlap_ok and identity <= tolerance * max(1.0, self.total)

    def as_dict(self) -> dict[str, float]:
        return attrs.asdict(self)


def decompose(events: Iterable[Event], clock_start: float, clock_end: float) -> Decomposition:
    events = list(events)
    drafting = _union(_clip(((e.start, e.end) for e in events if e.kind in DRAFT_KINDS), clock_start, clock_end))
    target = _union(_clip(((e.start, e.end) for e in events if e.kind in TARGET_KINDS), clock_start, clock_end))
    total = clock_end - clock_start
    d, v = _length(drafting), _length(target)
    o = _intersect(drafting, target)
    return Decomposition(total=total, drafting=d, verification=v, overlap=o, residual=total - d - v + o)
