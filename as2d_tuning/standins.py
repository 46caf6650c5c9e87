"""The priced stand-ins a replay runs the engine's own loop on, and the protocols they keep.

The engine's loop (``decode.loop.target_loop``) and as2d's proposer (``decode.proposers.PublishedProposer``)
use only part of a target session and of the candidate buffer: :class:`LoopSession` and
:class:`PublishedRecord` name that part. :class:`PricedTarget` and :class:`PricedRecord` implement them
on a simulated clock; the real ``TargetSession`` and ``CandidateBuffer`` provide them too
(tests/test_replay.py checks both sides), so the loop that runs in a replay is the one that decodes.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from as2d_core.decode.options import DEFAULTS

from .records import Batch


@runtime_checkable
class LoopSession(Protocol):
    """What the engine's loop and proposer call on a target session (a part of ``contracts.TargetSession``)."""

    eos_token: int
    max_new_tokens: int
    cache_length: int

    def first_token(self) -> int: ...

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]: ...

    def truncate(self, cache_length: int) -> None: ...

    def use_threads(self, threads: int) -> None: ...


class Snapshot(Protocol):
    """The published tokens at one instant and whether the drafter has closed its record."""

    tokens: Sequence[int]
    closed: bool

    def __len__(self) -> int: ...


@runtime_checkable
class PublishedRecord(Protocol):
    """What as2d's proposer reads of the drafter's published record (``decode.buffer.CandidateBuffer``)."""

    @property
    def batches(self) -> Sequence: ...

    def snapshot(self) -> Snapshot: ...


class Clock:
    """The simulated clock of one replay (seconds from the start of the decode clock)."""

    def __init__(self) -> None:
        self.t = 0.0


class PricedTarget(LoopSession):
    """A stand-in for the target's session in a replay: the engine's loop runs on it unchanged.

    Its greedy tokens come from the traced reference (greedy output does not depend on cost) and
    each call is charged ``price(width, alone)`` on the simulated clock; ``use_threads`` is the
    engine's switch between its shared threads and all of them (``all_threads``, the replayed
    options' own), priced alone: the record has closed, or the drafter is starved.
    """

    def __init__(self, reference: Sequence[int], eos: int | None, max_new_tokens: int,
                 price: Callable[[int, bool], float], clock: Clock, alone: bool,
                 all_threads: int = DEFAULTS.target_threads) -> None:
        self.reference = reference
        self.all_threads = all_threads
        self.eos_token = eos if eos is not None else -1  # -1: a response cut by its length, never by a token
        self.max_new_tokens = max_new_tokens
        self.price = price
        self.clock = clock
        self.alone = alone
        self.cache_length = 0
        self.calls: list[tuple[float, float, bool]] = []  # (t0, t1, alone) of every call

    def first_token(self) -> int:
        return self.reference[0]

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        width = len(candidates) + 1
        t0 = self.clock.t
        self.clock.t += self.price(width, self.alone)
        self.calls.append((t0, self.clock.t, self.alone))
        after = self.cache_length + 1  # reference index of the token after the root
        self.cache_length += width
        return [self.reference[i] if i < len(self.reference) else -1 for i in range(after, after + width)]

    def truncate(self, cache_length: int) -> None:
        self.cache_length = cache_length

    def use_threads(self, threads: int) -> None:
        self.alone = threads == self.all_threads


@attrs.frozen
class _Snapshot:
    tokens: tuple[int, ...]
    closed: bool

    def __len__(self) -> int:
        return len(self.tokens)


class PricedRecord(PublishedRecord):
    """The drafter's published record as the target sees it at the simulated instant.

    ``visible()`` says how many batches are published now: by their (priced or native)
    publication times, or by what a native run's rounds saw.
    """

    def __init__(self, batches: Sequence[Batch], visible: Callable[[], int]) -> None:
        self.all_batches = tuple(batches)
        self.visible = visible
        self._ends = []
        n = 0
        for b in self.all_batches:
            n += len(b.tokens)
            self._ends.append(n)
        self._tokens = tuple(t for b in self.all_batches for t in b.tokens)

    def snapshot(self) -> _Snapshot:
        seen = self.visible()
        closed = seen == len(self.all_batches) and bool(self.all_batches) and self.all_batches[-1].final
        return _Snapshot(self._tokens[: self._ends[seen - 1]] if seen else (), closed)

    @property
    def batches(self) -> tuple[Batch, ...]:
        return self.all_batches[: self.visible()]
