"""The drafter's side: a thread that drafts, bridges and publishes immutable batches, never reading the target."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from as2d_core.workers.cleanup import reported
from as2d_core.capabilities import CancellableJob
from as2d_core.contracts import Bridge, DraftJob, DraftPiece
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.events import EventLog
from as2d_core.workers import lifetimes
from as2d_core.workers.priority import lower_thread_priority


def _merged(pieces: list[DraftPiece]) -> DraftPiece:
    """Consecutive pieces as one (their tokens, confidences and audio span in order)."""
    confidences = None if any(p.confidences is None for p in pieces) else tuple(c for p in pieces for c in p.confidences)
    spans = [p.span_s for p in pieces if p.span_s is not None]
    return DraftPiece(tokens=tuple(t for p in pieces for t in p.tokens), confidences=confidences,
                      boundary=any(p.boundary for p in pieces), span_s=(spans[0][0], spans[-1][1]) if spans else None)


class Producer(threading.Thread):
    """Runs one drafter over one request and publishes batches; never reads target state.

    Started at the request's arrival, it prepares the drafter itself (``start_job``) while the target
    encodes its audio. The bridge needs the target's prepared session (its tokenizer and end token),
    so until :meth:`attach_bridge` is called the drafter keeps drafting and its pieces are held;
    ``attach_bridge`` bridges and publishes them at once (and closes the record if the drafter has
    already finished), so the target's first step sees everything drafted during its preparation.
    """

    def __init__(
        self,
        job: DraftJob | None,
        bridge: Bridge | None,
        buffer: CandidateBuffer,
        publication_size: int,
        events: EventLog,
        start_job: Callable[[], DraftJob] | None = None,
        niceness: int = 0,
    ) -> None:
        super().__init__(name=f"as2d-producer-{buffer.source_id}", daemon=True)
        if (job is None) == (start_job is None):
            raise ValueError("give the producer a prepared job or a way to prepare one, not both")
        self.job = job
        self.start_job = start_job
        self.niceness = niceness  # added to this thread's (and the drafter's own threads') niceness
        self.vocab_size: int | None = None  # set with the bridge: ids outside [0, vocab_size) would fail the target
        self.bridge = bridge
        self.buffer = buffer
        self.publication_size = publication_size
        self.events = events
        self.stop_requested = threading.Event()
        self.error: str | None = None
        # Publication state, shared with attach_bridge (the target's thread) under one lock.
        self._lock = threading.Lock()
        self._held: list[DraftPiece] = []  # drafted before the bridge was attached
        self._ended: bool | None = None  # set when drafting is over and the bridge has yet to finish it
        self._tokens: list[int] = []
        self._confidences: list[float] | None = []
        self._drafted = 0
        lifetimes.track_thread(self)  # waited for at exit if a request ever returns before it ends

    def stop(self) -> None:
        """Stop drafting: no further piece is taken, and a job that can cancel its work is told at once."""
        self.stop_requested.set()
        job = self.job
        if isinstance(job, CancellableJob):
            try:
                job.cancel()
            except Exception:  # a drafter's fault never reaches the target's thread
                pass

    def attach_bridge(self, bridge: Bridge) -> None:
        """The target is prepared: its bridge converts everything drafted so far and from now on."""
        with self._lock:
            self.bridge = bridge
            held, self._held = self._held, []
            try:
                if held:  # one bridge call for the whole backlog: a flooding drafter must not cost the target per piece
                    self._bridge_and_publish(_merged(held), time.perf_counter())
                if self._ended is not None:
                    self._finish(self._ended)
            except Exception as exc:  # the drafter failed or was stopped meanwhile: drafts end, the target goes on
                self.error = self.error or f"{type(exc).__name__}: {exc}"
                self.buffer.close(f"producer failed: {self.error}")

    def run(self) -> None:
        deferred = False
        lower_thread_priority(self.niceness)
        try:
            if self.job is None:
                start = time.perf_counter()
                self.job = self.start_job()
                self.events.add("draft-prepare", start)
            pieces = iter(self.job.pieces())
            while not self.stop_requested.is_set():
                start = time.perf_counter()
                piece = next(pieces, None)
                if piece is None:
                    break
                with self._lock:
                    if self.bridge is None:
                        self.events.add("draft", start, tokens=len(piece.tokens))
                        self._held.append(piece)
                    else:
                        self._bridge_and_publish(piece, start)
            ended = self.job.ended_with_eos and not self.stop_requested.is_set()
            with self._lock:
                if self.bridge is None:  # attach_bridge finishes the record
                    self._ended, deferred = ended, True
                else:
                    self._finish(ended)
        except Exception as exc:  # a drafter failure must never reach the target
            self.error = f"{type(exc).__name__}: {exc}"
            self.buffer.close(f"producer failed: {self.error}")
        finally:
            if not deferred:
                self.buffer.close("stopped")
            if self.job is not None:
                reported(self.job.close, f"closing the draft job of {self.buffer.request_id}")

    def _bridge_and_publish(self, piece: DraftPiece, start: float) -> None:
        ready, ready_conf = self.bridge.push(piece.tokens, piece.confidences)
        self.events.add("draft", start, tokens=len(piece.tokens))
        self._tokens.extend(ready)
        known = self._confidences is not None and ready_conf is not None
        self._confidences = self._confidences + ready_conf if known else None
        self._drafted += len(piece.tokens)
        if piece.boundary or self._drafted >= self.publication_size:
            self._publish(self._tokens, self._confidences, piece.span_s)
            self._tokens, self._confidences, self._drafted = [], [], 0

    def _finish(self, ended: bool) -> None:
        """Flush the bridge and publish the final batch, which closes the record."""
        start = time.perf_counter()
        tail, _ = self.bridge.finish(ended)
        self.events.add("draft", start, tokens=0)
        tokens, confidences = self._tokens, self._confidences
        if tail and confidences:  # keep the confidences of what was drafted; the bridge's tail has none
            self._publish(tokens, confidences, None)
            tokens = []
        self._publish(tokens + tail, confidences if not tail else None, None, final=True)
        self._tokens, self._confidences, self._drafted = [], [], 0

    def _publish(self, tokens, confidences, span_s, final: bool = False) -> None:
        if self.vocab_size is not None:
            outside = next((t for t in tokens if not 0 <= t < self.vocab_size), None)
            if outside is not None:
                raise ValueError(f"drafter published id {outside}, outside the target vocabulary (0..{self.vocab_size - 1})")
        start = time.perf_counter()
        batch = self.buffer.publish(tokens, confidences if confidences else None, span_s, final=final)
        if batch is not None:
            self.events.add("publish", start, batch.published_at, tokens=len(batch.tokens))


def stop_and_join(producers: Sequence[Producer], timeout_s: float) -> list[Producer]:
    """Stop every producer and wait for them together, at most ``timeout_s``; those still running.

    A drafter inside a runtime call finishes that call first; one still running after the wait is
    left to ``workers.lifetimes``, which waits for it before the process exits.
    """
    deadline = time.perf_counter() + timeout_s
    for producer in producers:
        producer.stop()
    for producer in producers:
        if producer.ident is not None:
            producer.join(max(0.0, deadline - time.perf_counter()))
    return [p for p in producers if p.is_alive()]
