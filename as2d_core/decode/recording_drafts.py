"""A drafter that walks a long-form recording on its own seek, ahead of the target (As²d over a whole file).

On Whisper's long form each request starts where the target's last one ended, so a drafter asked per request can
only start at the request's arrival, encoding its audio beside the target's encoder on the same cores.
``RecordingDrafter`` drafts the recording instead, as the paper's drafter drafts a response: from the audio and the
instruction alone, following its own history. From a recording's first request on, one thread of its own decodes
its 30 s windows in timestamp mode, each starting where its own last complete segment ended (Whisper's seek, on
the drafter's tokens), and keeps the text of each segment with a time for every token (spread evenly over the
segment). A request then gets the drafted text inside its span of the recording as soon as it is drafted; the
drafter never waits for the target, and after the first windows it is ahead of it.

The target reads text only on this route (``timestamps.TextView``), so the drafter's timestamps are not passed
on, and its segment boundaries need not be the target's: the aligner finds its place in the text. Proposals
only decide how many tokens a verification checks, so the transcript stays the target's own in every mode.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence

import attrs

from as2d_core.capabilities import TimestampVocabulary
from as2d_core.contracts import DraftJob, DraftPiece, Recording, Request, Source
from as2d_core.decode.wrappers import SourceWrapper
from as2d_core.workers import lifetimes
from as2d_core.workers.cleanup import reported

WINDOW_S = 30.0
# a request's text starts with the drafted tokens timed this much before its start: a token's time is a guess
# (spread over its segment), and the aligner skips a few tokens too many more cheaply than it finds missing ones
LEAD_S = 0.5


def drafted_segments(tokens: Sequence[int], begin: int, precision_s: float, window_s: float
                     ) -> tuple[list[tuple[float, float, list[int]]], float]:
    """A timestamped draft of one window as segments (start, end, text tokens; seconds into the window) and how
    far Whisper's seek rule moves on: to the last complete segment's end when text follows it that no timestamp
    closes (that text is left for the next window), else the whole window."""
    segments: list[tuple[float, float, list[int]]] = []
    start, text = 0.0, []
    closed_at = None  # the end of the last segment a timestamp closed
    for token in tokens:
        if token < begin:
            text.append(token)
            continue
        time_s = (token - begin) * precision_s
        if text:
            segments.append((start, max(time_s, start), text))
            closed_at, text = time_s, []
        start = time_s
    if text and closed_at is not None and closed_at > 0:
        return segments, closed_at
    if text:
        segments.append((start, window_s, text))
    return segments, window_s


@attrs.define
class _Walk:
    """One recording's draft: text tokens with their times (seconds of the recording), how far it reaches."""

    tokens: list[int] = attrs.Factory(list)
    times: list[float] = attrs.Factory(list)
    reached_s: float = 0.0
    allowed_s: float = 0.0  # the walk drafts a window only if it starts before this time
    ended: bool = False  # the walk reached the recording's end, failed or was stopped
    error: BaseException | None = None
    stop: threading.Event = attrs.Factory(threading.Event)
    changed: threading.Condition = attrs.Factory(threading.Condition)


class _SpanJob:
    """A request's drafts: the walk's tokens timed inside its span, handed out as the walk drafts them."""

    def __init__(self, walk: _Walk, start_s: float, end_s: float) -> None:
        self._walk, self._start_s, self._end_s = walk, start_s, end_s
        self.ended_with_eos = False
        self._cancelled = threading.Event()

    def pieces(self) -> Iterator[DraftPiece]:
        walk, given = self._walk, None  # given: the walk's index up to which tokens were handed out
        while not self._cancelled.is_set():
            with walk.changed:
                while not (walk.reached_s >= self._end_s or walk.ended or self._cancelled.is_set()):
                    walk.changed.wait(0.05)
                if walk.error is not None:
                    raise RuntimeError(f"the drafter's walk over the recording failed: {walk.error}")
                times, count, done = walk.times, len(walk.tokens), walk.reached_s >= self._end_s or walk.ended
            if given is None:
                given = next((i for i, t in enumerate(times[:count]) if t >= self._start_s - LEAD_S), count)
            end = given
            while end < count and times[end] < self._end_s:
                end += 1
            if end > given:
                yield DraftPiece(tokens=tuple(walk.tokens[given:end]), boundary=True)
                given = end
            if done:
                self.ended_with_eos = walk.reached_s >= self._end_s and not self._cancelled.is_set()
                return

    def cancel(self) -> None:
        self._cancelled.set()

    def close(self) -> None:
        self.cancel()


class RecordingDrafter(SourceWrapper):
    """A timestamped source that drafts each long-form recording once, on its own seek, in a thread of its own.

    ``prepare`` on a request cut from a recording (``Request.recording``) starts the recording's walk if none runs
    (on the caller's niceness and with its threads: a producer's) and returns the drafts inside the request's span;
    any other request is drafted by the source as it is. ``stop`` ends the walks (the files are done).
    """

    def __init__(self, source: Source, window_s: float = WINDOW_S) -> None:
        if not isinstance(source, TimestampVocabulary):
            raise TypeError(f"source {source.name} has no timestamp tokens: it cannot walk a recording on its own seek")
        super().__init__(source)
        self.window_s = window_s
        self._lock = threading.Lock()
        self._walks: weakref.WeakKeyDictionary[Recording, _Walk] = weakref.WeakKeyDictionary()

    def prepare(self, request: Request, language: str, threads: int) -> DraftJob:
        recording = request.recording
        if recording is None:
            return self.inner.prepare(request, language, threads)
        with self._lock:
            walk = self._walks.get(recording)
            if walk is None:
                walk = self._walks[recording] = _Walk()
                lifetimes.start_thread(self._walk, f"as2d-recording-drafts-{request.request_id}", walk, recording,
                                       request, language, threads)
        start_s = request.offset / request.sample_rate
        self._allow(walk, start_s + request.duration_s)  # what the request needs, at once
        return _SpanJob(walk, start_s, start_s + request.duration_s)

    def ahead_of(self, request: Request) -> None:
        """The target is prepared for ``request``: the walk may draft a window ahead of its span (while the target
        verifies it, not beside its encoder)."""
        walk = self._walks.get(request.recording)
        if walk is not None:
            self._allow(walk, (request.offset + request.audio.size) / request.sample_rate + self.window_s)

    @staticmethod
    def _allow(walk: _Walk, until_s: float) -> None:
        with walk.changed:
            walk.allowed_s = max(walk.allowed_s, until_s)
            walk.changed.notify_all()

    def stop(self) -> None:
        """End every walk: their files' last requests are decoded, or the files failed."""
        with self._lock:
            walks = list(self._walks.values())
            self._walks.clear()
        for walk in walks:
            walk.stop.set()

    def _walk(self, walk: _Walk, recording: Recording, first: Request, language: str, threads: int) -> None:
        rate, total = first.sample_rate, recording.audio.size
        window = int(self.window_s * rate)
        seek = 0
        try:
            while seek < total and not walk.stop.is_set():
                with walk.changed:
                    while seek >= walk.allowed_s * rate and not walk.stop.is_set():
                        walk.changed.wait(0.05)
                if walk.stop.is_set():
                    break
                end = min(seek + window, total)
                request = attrs.evolve(first, request_id=f"{first.request_id}-d{seek}", audio=recording.audio[seek:end],
                                       offset=seek, timestamps="segment", prompt=None, previous_text=None,
                                       prefix=None, temperature=0.0, max_new_tokens=None, word_timestamps=False,
                                       scores=False)
                job = self.inner.prepare(request, language, threads)
                try:
                    drafted = [t for piece in job.pieces() for t in piece.tokens]
                finally:
                    reported(job.close, "the recording's drafter: closing a window's job")
                segments, moved_s = drafted_segments(drafted, self.timestamp_begin, self.time_precision_s,
                                                     (end - seek) / rate)
                with walk.changed:
                    for start_s, end_s, text in segments:
                        step = (end_s - start_s) / len(text)
                        walk.tokens.extend(text)
                        walk.times.extend(seek / rate + start_s + step * i for i in range(len(text)))
                    seek = max(seek + 1, min(end, seek + round(moved_s * rate)))
                    walk.reached_s = seek / rate if seek < total else float("inf")
                    walk.changed.notify_all()
        except Exception as exc:  # surfaces in each request's pieces, where the engine keeps it from the target
            walk.error = exc.with_traceback(None)
        finally:
            with walk.changed:
                walk.ended = True
                walk.changed.notify_all()
