"""The append-only candidate buffer between one producer and the target (C.1).

The producer appends immutable batches; the target reads immutable snapshots.
Neither side ever waits for the other: appends and snapshots take a lock for a
few list operations only.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import attrs

from as2d_core.contracts import PublishedBatch


@attrs.frozen
class Snapshot:
    """What was published at one instant: tokens in source order, and whether the record is closed."""

    tokens: tuple[int, ...]
    published_at: tuple[float, ...]
    closed: bool

    def __len__(self) -> int:
        return len(self.tokens)


class CandidateBuffer:
    """Ordered, append-only record of one request's published candidates for one source."""

    def __init__(self, request_id: str, source_id: str, producer_id: str) -> None:
        self.request_id = request_id
        self.source_id = source_id
        self.producer_id = producer_id
        self._lock = threading.Lock()
        self._batches: list[PublishedBatch] = []
        self._tokens: list[int] = []
        self._times: list[float] = []
        self._closed = False
        self.close_reason: str | None = None
        self._snapshot = Snapshot((), (), False)

    def publish(
        self,
        tokens: Sequence[int],
        confidences: Sequence[float] | None = None,
        span_s: tuple[float, float] | None = None,
        final: bool = False,
    ) -> PublishedBatch | None:
        """Append one immutable batch; an empty non-final batch publishes nothing."""
        tokens = tuple(int(t) for t in tokens)
        if not tokens and not final:
            return None
        with self._lock:
            if self._closed:
                raise RuntimeError("candidate record is closed; published batches are final")
            batch = PublishedBatch(
                request_id=self.request_id,
                source_id=self.source_id,
                producer_id=self.producer_id,
                offset=len(self._tokens),
                tokens=tokens,
                published_at=time.perf_counter(),
                confidences=tuple(confidences) if confidences is not None else None,
                span_s=span_s,
                final=final,
            )
            self._batches.append(batch)
            self._tokens.extend(tokens)
            self._times.extend([batch.published_at] * len(tokens))
            if final:
                self._closed = True
                self.close_reason = "finished"
            self._snapshot = Snapshot(tuple(self._tokens), tuple(self._times), self._closed)
            return batch

    def close(self, reason: str) -> None:
        """End the record without more tokens (producer crashed, was stopped, or finished)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.close_reason = reason
                self._snapshot = Snapshot(tuple(self._tokens), tuple(self._times), True)

    def snapshot(self) -> Snapshot:
        # Snapshots are rebuilt on publish, so reading is one attribute load.
        return self._snapshot

    @property
    def batches(self) -> tuple[PublishedBatch, ...]:
        with self._lock:
            return tuple(self._batches)
