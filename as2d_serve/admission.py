"""Who may wait and who may decode: the server's limits, its admission to the decode slots, and the grace
period after a stop signal (``Drain``). The event loop is the only thread that touches them."""
from __future__ import annotations

import asyncio
import contextlib
import math
import time

import attrs

from as2d_core.setup.options import SERVE

from .metrics import Metrics

# After a stop signal the socket closes once no request has come or gone for this long: less than any
# Retry-After, so a client that honours one finds the socket closed (refused), not reset.
QUIET_S = 0.3

# The deadline is counted per this much audio (Whisper's window): an upload of several minutes, which OpenAI's
# 25 MB allows, is given as many deadlines as it has windows, so that the default answers it under load.
DEADLINE_AUDIO_S = 30.0


@attrs.frozen
class Limits:
    """What the server admits and how long it waits; the defaults are ``as2d serve``'s (``options.SERVE``)."""

    queue_size: int = SERVE["queue_size"].default  # requests waiting for a decode slot
    max_upload_bytes: int = int(SERVE["max_upload_mb"].default * 1024 * 1024)
    deadline_s: float = SERVE["deadline_s"].default  # from arrival to answer, for each DEADLINE_AUDIO_S of audio
    api_key: str | None = None
    grace_s: float = SERVE["grace_s"].default  # after a stop signal, for decodes under way

    def deadline_for(self, audio_s: float) -> float:
        """Seconds from arrival to answer for ``audio_s`` of audio: ``deadline_s`` for each started 30 s."""
        return self.deadline_s * max(1, math.ceil(audio_s / DEADLINE_AUDIO_S))


class QueueFull(Exception):
    pass


class Admission:
    """At most ``slots`` transcriptions at a time, and at most ``queue_size`` waiting for one."""

    def __init__(self, slots: int, queue_size: int, metrics: Metrics):
        self.slots, self.queue_size, self.metrics = slots, queue_size, metrics
        self._semaphore = asyncio.Semaphore(slots)
        self.waiting = self.active = 0
        self.mean_s = 5.0  # running mean of a transcription's time, for Retry-After

    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.mean_s * (self.waiting + 1) / self.slots))

    async def enter(self) -> None:
        if self._semaphore.locked() and self.waiting >= self.queue_size:
            raise QueueFull()
        self.waiting += 1
        self.metrics.waiting.set(self.waiting)
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
            self.metrics.waiting.set(self.waiting)
        self.active += 1
        self.metrics.active.set(self.active)

    def leave(self, took_s: float | None) -> None:
        if took_s is not None:
            self.mean_s = 0.8 * self.mean_s + 0.2 * took_s
        self.active -= 1
        self.metrics.active.set(self.active)
        self._semaphore.release()


class Drain:
    """A stop signal's grace period, as the requests see it; the event loop is its only thread."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.deadline: float | None = None
        self.in_flight = 0
        self.last_seen = time.monotonic()  # a request's arrival or its answer

    def begin(self) -> None:
        """The first signal starts the grace period; another ends it at once."""
        now = time.monotonic()
        self.deadline = now + self.grace_s if self.deadline is None else min(self.deadline, now)

    @property
    def started(self) -> bool:
        return self.deadline is not None

    def overdue(self) -> bool:
        return self.started and time.monotonic() >= self.deadline

    def retry_after_s(self) -> int:
        """Until this server is gone; a replacement may be up by then."""
        return max(1, math.ceil(self.deadline - time.monotonic()))

    def done(self) -> bool:
        """Whether the server may close: nothing in flight and quiet for QUIET_S, or the grace period over."""
        quiet = self.in_flight == 0 and time.monotonic() - self.last_seen >= QUIET_S
        return self.started and (quiet or self.overdue())

    @contextlib.contextmanager
    def serving(self):
        """Around each transcription request, so that the server closes only when none is left."""
        self.in_flight += 1
        self.last_seen = time.monotonic()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_seen = time.monotonic()
