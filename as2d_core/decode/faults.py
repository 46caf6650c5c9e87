"""Drafter faults on purpose: a ``Source`` wrapper that breaks its drafter in one named way.

The promise of As²d is that a drafter can never change or lose an answer; these
faults are how tests, ``as2d serve --fault`` and the soak prove it. Every kind
uses only the ``Source``/``DraftJob`` contracts, so any drafter can be broken:

- ``raise``: drafts a few real pieces, then raises;
- ``stall``: drafts a few real pieces, then blocks (``stall_s``) without a word;
- ``slow``: every piece takes ten times as long as the real drafter took;
- ``garbage-in``: random ids inside the drafter's vocabulary (the bridge turns
  them into real target tokens that mean nothing);
- ``garbage-out``: ids outside every vocabulary, published as if the drafter
  shared the target's tokenizer, so they reach the engine unconverted;
- ``flood``: publishes real-looking ids as fast as it can, without end.

A fault that never hits proves nothing, and on a busy machine the target can finish
before a drafter reaches its fault. ``FaultLandingTarget`` makes the target's first
step wait until the request's fault has taken effect, so every injected fault lands
mid-request, whatever the load (``as2d serve --fault`` uses it).
"""
from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator

from tokenizer_bridges import IdentityBridge

from as2d_core.capabilities import CancellableJob
from as2d_core.contracts import BridgeFactory, DraftJob, DraftPiece, Request, Source, Target, TargetSession
from as2d_core.decode.wrappers import SessionWrapper, SourceWrapper, TargetWrapper

FAULTS = ("raise", "stall", "slow", "garbage-in", "garbage-out", "flood")
REAL_PIECES_FIRST = 3  # raise and stall draft this many real pieces first, so the fault hits mid-request
SLOWDOWN = 10
FLOOD_LIMIT = 200_000  # tokens; a flood is endless in spirit, bounded so a forgotten one cannot fill memory
LANDING_WAIT_S = 30.0  # the longest a target waits for its request's fault to take effect


class InjectedFault(RuntimeError):
    """The drafter failure a ``FaultySource`` was asked to cause."""


def check_fault(kind: str) -> str:
    if kind not in FAULTS:
        raise ValueError(f"unknown drafter fault {kind!r}; choose one of {', '.join(FAULTS)}")
    return kind


class FaultySource(SourceWrapper):
    """``inner`` with one injected fault; ``publish_as`` is the target's vocabulary (``garbage-out`` only)."""

    def __init__(self, inner: Source, kind: str, publish_as: str | None = None,
                 stall_s: float = 20.0, seed: int = 0) -> None:
        super().__init__(inner)
        self.fault = check_fault(kind)
        # Claiming the target's vocabulary skips the bridge: the ids reach the engine as they are.
        self.vocabulary = publish_as if kind == "garbage-out" and publish_as else inner.vocabulary
        self.stall_s = stall_s
        self._random = random.Random(seed)
        self._landed: dict[str, threading.Event] = {}  # request id -> set once its fault has taken effect
        self._waited: set[str] = set()  # requests whose target has waited for the fault already
        self._lock = threading.Lock()

    def bridge(self, drafter_bridge: BridgeFactory) -> BridgeFactory:
        """This source's bridge, given the one resolved for its drafter: ``garbage-out`` claims the target's
        vocabulary, so its ids pass unconverted (what ``resolve_bridge`` chooses for it too)."""
        return IdentityBridge.for_request if self.vocabulary != self.inner.vocabulary else drafter_bridge

    def landed(self, request_id: str) -> threading.Event:
        """Set once the fault of ``request_id`` has taken effect (or its drafting ended without reaching it)."""
        with self._lock:
            return self._landed.setdefault(request_id, threading.Event())

    def prepare(self, request: Request, language: str, threads: int) -> "FaultyJob":
        return FaultyJob(self, self.inner.prepare(request, language, threads), self._random.randrange(1 << 30),
                         self.landed(request.request_id))

    def wait_until_landed(self, request_id: str, timeout_s: float) -> None:
        """Block until the fault of ``request_id`` has taken effect, once per request (a target-only
        check of the same request that follows drafts nothing, so it must not wait)."""
        with self._lock:
            if request_id in self._waited:
                return
            self._waited.add(request_id)
        self.landed(request_id).wait(timeout_s)


class FaultyJob:
    """One request's drafting with the source's fault."""

    def __init__(self, source: FaultySource, inner_job: DraftJob, seed: int, landed: threading.Event) -> None:
        self.source = source
        self.inner = inner_job
        self.random = random.Random(seed)
        self.ended_with_eos = False
        self.landed = landed
        self._closed = threading.Event()

    def pieces(self) -> Iterator[DraftPiece]:
        try:
            yield from self._faulty_pieces()
        finally:
            self.landed.set()  # a drafter that ended before its fault holds no target back

    def _faulty_pieces(self) -> Iterator[DraftPiece]:
        kind = self.source.fault
        real = iter(self.inner.pieces())
        if kind == "slow":
            yield from self._slow(real)
            return
        if kind == "flood":
            yield from self._flood(real)
            return
        if kind in ("garbage-in", "garbage-out"):
            yield from self._garbage(real, inside=kind == "garbage-in")
            return
        for piece in itertools.islice(real, REAL_PIECES_FIRST):
            yield piece
        self.landed.set()
        if kind == "raise":
            raise InjectedFault("injected drafter fault: raise")
        stalled = time.perf_counter()
        self._closed.wait(self.source.stall_s)  # stall: no pieces, no end, no error, until stopped or stall_s
        raise InjectedFault(f"injected drafter fault: stalled for {time.perf_counter() - stalled:.1f} s")

    def _slow(self, real: Iterator[DraftPiece]) -> Iterator[DraftPiece]:
        while True:
            start = time.perf_counter()
            piece = next(real, None)
            if piece is None:
                self.ended_with_eos = bool(self.inner.ended_with_eos)
                return
            self.landed.set()
            self._closed.wait((SLOWDOWN - 1) * (time.perf_counter() - start))
            yield piece

    def _garbage(self, real: Iterator[DraftPiece], inside: bool) -> Iterator[DraftPiece]:
        eos = int(self.source.eos_token)
        for piece in real:
            if inside:
                tokens = tuple(self.random.randrange(eos) for _ in piece.tokens)
            else:
                tokens = tuple(self.random.choice((-1 - self.random.randrange(1 << 20), eos + (1 << 24)))
                               for _ in piece.tokens)
            self.landed.set()  # the producer gets it next, whatever the target does meanwhile
            yield DraftPiece(tokens=tokens, boundary=piece.boundary, span_s=piece.span_s)

    def _flood(self, real: Iterator[DraftPiece]) -> Iterator[DraftPiece]:
        seen = [t for piece in itertools.islice(real, REAL_PIECES_FIRST) for t in piece.tokens] or [0]
        for _ in range(FLOOD_LIMIT // 8):
            self.landed.set()
            yield DraftPiece(tokens=tuple(self.random.choice(seen) for _ in range(8)), boundary=True)

    def cancel(self) -> None:
        """A stall or a slowdown ends at once (the drafter was stopped); the real job is told too."""
        self._closed.set()
        if isinstance(self.inner, CancellableJob):
            self.inner.cancel()

    def close(self) -> None:
        self._closed.set()
        self.inner.close()


class FaultLandingTarget(TargetWrapper):
    """A target whose first step in each request waits until that request's fault has taken effect
    (at most ``wait_s``): the fault then always lands while the target decodes.

    For drafters that start with the request (``start="arrival"``, the default): a prepared start
    calls ``first_token`` once before its drafter runs. The faulty job must run on the engine's
    producer thread (no ``LookaheadSource`` around it), so that the fault reaches the producer
    before the request can end: a stopped producer reads nothing more from a drafting thread.
    """

    def __init__(self, target: Target, source: FaultySource, wait_s: float = LANDING_WAIT_S) -> None:
        super().__init__(target)
        self.source, self.wait_s = source, wait_s

    def prepare(self, request: Request, threads: int) -> TargetSession:
        return _LandingSession(self.inner.prepare(request, threads), self.source, request.request_id, self.wait_s)


class _LandingSession(SessionWrapper):
    """A target session whose ``first_token`` waits for the fault; every other call is the session's own."""

    def __init__(self, session: TargetSession, source: FaultySource, request_id: str, wait_s: float) -> None:
        super().__init__(session)
        self._source, self._request_id, self._wait_s = source, request_id, wait_s

    def first_token(self) -> int:
        self._source.wait_until_landed(self._request_id, self._wait_s)
        return self.inner.first_token()
