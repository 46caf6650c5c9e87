"""Drafting the next window while the target still verifies this one.

A drafter needs nothing from the target, so over a long file it can work ahead:
``LookaheadSource`` wraps any in-process source and, once the current window's
draft is finished and the next window is queued (``queue_next``), drafts the
next window in a background thread, collecting its pieces. When the engine later
asks for that window's job, it gets the pieces drafted so far at once and the
rest as they come. Only the ordinary ``Source``/``DraftJob`` contracts are used, so the engine
does not know it happens. A failure in the background surfaces in ``pieces``
(the producer's side), where the engine already keeps it away from the target.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from as2d_core.workers import lifetimes
from as2d_core.workers.cleanup import reported
from as2d_core.workers.priority import lower_thread_priority, thread_niceness
from as2d_core.capabilities import CancellableJob
from as2d_core.contracts import DraftJob, DraftPiece, Request, Source
from as2d_core.decode.wrappers import SourceWrapper

_POLL_S = 0.05
_END = object()


class _AheadJob:
    """A draft running in its own thread; ``pieces`` replays what it made and follows it live."""

    def __init__(self, source: Source, request: Request, language: str, threads: int, on_end,
                 prepared: DraftJob | None = None, niceness: int | None = None) -> None:
        self.request_id = request.request_id
        self.language = language
        # the drafting thread's niceness once it runs; a next window's job started from another thread (the
        # target's, at its first commit) takes on the niceness of the window drafted before it
        self.niceness = niceness
        self.ended_with_eos = False
        self.done = False  # set by the source, under its lock, when drafting has ended
        self._queue: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._on_end = on_end
        self._prepared = prepared
        self._start_lock = threading.Lock()
        self._started = False
        self._running: DraftJob | None = None  # the inner job while it drafts, to cancel it
        self._run_args = (source, request, language, threads)

    def start(self) -> None:
        # The thread is made here, not in __init__: a job never started (the engine ran target-only)
        # then holds no thread whose target points back at it, and is freed at once, not by the
        # cycle collector (a server keeps every such cycle's drafter state until that runs).
        with self._start_lock:
            if not self._started:
                self._started = True
                args, self._run_args = self._run_args, None
                lifetimes.start_thread(self._draft, f"as2d-lookahead-{self.request_id}", *args)

    def _draft(self, source: Source, request: Request, language: str, threads: int) -> None:
        current = thread_niceness()
        if self.niceness is not None and current is not None:
            lower_thread_priority(self.niceness - current)  # nothing unless the window before ran nicer
        self.niceness = thread_niceness()
        job = self._prepared
        try:
            job = self._running = job or source.prepare(request, language, threads)
            if self._stop.is_set():  # closed while it was being prepared
                return
            for piece in job.pieces():
                if self._stop.is_set():
                    break
                self._queue.put(piece)
            else:
                self.ended_with_eos = bool(job.ended_with_eos)
            self._queue.put(_END)
        except Exception as exc:  # handed to the consumer, which is the engine's producer thread
            self._queue.put(exc.with_traceback(None))  # a traceback would tie this frame to the queue: a cycle
        finally:
            self._running = None
            if job is not None:
                reported(job.close, "the lookahead drafter: closing the drafted job")
            on_end, self._on_end, self._prepared = self._on_end, None, None  # no cycle back to the source
            on_end(self)

    def pieces(self) -> Iterator[DraftPiece]:
        self.start()  # a job prepared on request starts drafting when the engine's producer asks, as unwrapped
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if item is _END:
                return
            if isinstance(item, Exception):
                try:
                    raise item
                finally:
                    item = None  # else its traceback holds this frame and the frame holds it: a cycle
            yield item

    def cancel(self) -> None:
        """Stop drafting: the wrapped job is cancelled too, if it can be."""
        self._stop.set()
        running = self._running
        if isinstance(running, CancellableJob):
            reported(running.cancel, "the lookahead drafter: cancelling the drafted job")

    def close(self) -> None:
        self.cancel()
        with self._start_lock:  # never started: nothing else will release what prepare made
            prepared = None
            if not self._started:
                self._started = True
                prepared, self._prepared, self._on_end, self._run_args = self._prepared, None, None, None
        if prepared is not None:
            reported(prepared.close, "the lookahead drafter: closing a job prepared ahead")


class LookaheadSource(SourceWrapper):
    """A source whose next window is drafted as soon as the current window's draft ends."""

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self._lock = threading.Lock()
        self._drafting: _AheadJob | None = None  # the job whose end starts the next one
        self._next: tuple[Request, int] | None = None
        self._ahead: _AheadJob | None = None

    def queue_next(self, request: Request, threads: int) -> None:
        """Draft ``request`` once the draft now running ends, at once if it has ended (else at the next
        ``prepare``'s end)."""
        with self._lock:
            self._next = (request, threads)
            if self._drafting is not None and self._drafting.done:
                self._start_next(self._drafting)

    def prepare(self, request: Request, language: str, threads: int) -> DraftJob:
        with self._lock:
            ahead, self._ahead = self._ahead, None
            if ahead is not None and (ahead.request_id != request.request_id or ahead.language != language):
                ahead.close()  # drafted for another window or language: useless now
                ahead = None
            if ahead is None:
                # prepared here, before the engine starts its clock, as an unwrapped source would be
                prepared = self.inner.prepare(request, language, threads)
                ahead = _AheadJob(self.inner, request, language, threads, self._ended, prepared)
            self._drafting = ahead
            if ahead.done:  # drafted completely ahead: the next window may start now
                self._start_next(ahead)
            return ahead

    def cancel(self) -> None:
        """Stop anything drafted ahead (the file ended or a request failed)."""
        with self._lock:
            self._next = None
            self._drafting = None
            if self._ahead is not None:
                self._ahead.close()
                self._ahead = None

    def _ended(self, job: _AheadJob) -> None:
        with self._lock:
            job.done = True
            if job is self._drafting:
                self._start_next(job)

    def _start_next(self, drafted: _AheadJob) -> None:
        """With the lock held: draft the queued window in the language and at the niceness of the one drafted."""
        if self._next is None:
            return
        (request, threads), self._next = self._next, None
        self._ahead = _AheadJob(self.inner, request, drafted.language, threads, self._ended,
                                niceness=drafted.niceness)
        self._ahead.start()
