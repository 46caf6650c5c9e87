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
"""
from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator, Sequence

from .contracts import DraftPiece, Request, Source

FAULTS = ("raise", "stall", "slow", "garbage-in", "garbage-out", "flood")
REAL_PIECES_FIRST = 3  # raise and stall draft this many real pieces first, so the fault hits mid-request
SLOWDOWN = 10
FLOOD_LIMIT = 200_000  # tokens; a flood is endless in spirit, bounded so a forgotten one cannot fill memory


class InjectedFault(RuntimeError):
    """The drafter failure a ``FaultySource`` was asked to cause."""


def check_fault(kind: str) -> str:
    if kind not in FAULTS:
        raise ValueError(f"unknown drafter fault {kind!r}; choose one of {', '.join(FAULTS)}")
    return kind


class FaultySource:
    """``inner`` with one injected fault; ``publish_as`` is the target's vocabulary (``garbage-out`` only)."""

    def __init__(self, inner: Source, kind: str, publish_as: str | None = None,
                 stall_s: float = 20.0, seed: int = 0) -> None:
        self.inner = inner
        self.fault = check_fault(kind)
        self.name = inner.name
        self.languages = inner.languages
        self.eos_token = inner.eos_token
        # Claiming the target's vocabulary skips the bridge: the ids reach the engine as they are.
        self.vocabulary = publish_as if kind == "garbage-out" and publish_as else inner.vocabulary
        self.stall_s = stall_s
        self._random = random.Random(seed)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.inner.decode_text(tokens)

    def prepare(self, request: Request, language: str, threads: int) -> "FaultyJob":
        return FaultyJob(self, self.inner.prepare(request, language, threads), self._random.randrange(1 << 30))


class FaultyJob:
    """One request's drafting with the source's fault."""

    def __init__(self, source: FaultySource, inner_job, seed: int) -> None:
        self.source = source
        self.inner = inner_job
        self.random = random.Random(seed)
        self.ended_with_eos = False
        self._closed = threading.Event()

    def pieces(self) -> Iterator[DraftPiece]:
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
        if kind == "raise":
            raise InjectedFault("injected drafter fault: raise")
        self._closed.wait(self.source.stall_s)  # stall: no pieces, no end, no error
        raise InjectedFault(f"injected drafter fault: stalled for {self.source.stall_s:.0f} s")

    def _slow(self, real: Iterator[DraftPiece]) -> Iterator[DraftPiece]:
        while True:
            start = time.perf_counter()
            piece = next(real, None)
            if piece is None:
                self.ended_with_eos = bool(getattr(self.inner, "ended_with_eos", False))
                return
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
            yield DraftPiece(tokens=tokens, boundary=piece.boundary, span_s=piece.span_s)

    def _flood(self, real: Iterator[DraftPiece]) -> Iterator[DraftPiece]:
        seen = [t for piece in itertools.islice(real, REAL_PIECES_FIRST) for t in piece.tokens] or [0]
        for _ in range(FLOOD_LIMIT // 8):
            yield DraftPiece(tokens=tuple(self.random.choice(seen) for _ in range(8)), boundary=True)

    def close(self) -> None:
        self._closed.set()
        self.inner.close()
