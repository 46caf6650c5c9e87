"""Cutting long audio into windows the models can take (at most 30 s), at pauses, as faster-whisper does.

A voice-activity detector (a plugin: the core imports no model runtime) marks the
stretches of speech; they are cut out and joined (``SpeechMap``, faster-whisper's ``vad_filter``).
Its sequential transcription walks the joined speech by its seek; its batched pipeline, the windows
route here, cuts it between stretches into windows as long as they stay within the limit
(``plan_windows``). Times in the joined speech are mapped back to the file's. Everything outside the
stretches is reported as skipped silence, so nothing is dropped without the caller being told.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from as2d_core.contracts import SAMPLE_RATE
from as2d_core.decode.options import CHUNK_S

MAX_WINDOW_S = float(CHUNK_S)
# faster-whisper's batched pipeline's VAD options (the detector's names, ``hookspecs.DETECTOR_OPTIONS``): speech
# split at pauses of 0.16 s, padded by 0.4 s, each span at most a window long (``plan_windows``)
WINDOWS_VAD = {"threshold": 0.5, "min_silence_ms": 160, "pad_ms": 400}
CLIPS = "clip_timestamps"  # what cut the audio (a plan's or transcript's ``detector``) where the caller gave clips


@runtime_checkable
class SpeechDetector(Protocol):
    """Finds speech in 16 kHz mono audio (registered by plugins with ``register_detectors``)."""

    name: str

    def speech_spans(self, audio: np.ndarray, max_span_s: float) -> list[tuple[int, int]]:
        """Ordered, non-overlapping ``(start, end)`` sample ranges of speech, each at most ``max_span_s`` long."""


@attrs.frozen
class Window:
    index: int
    start: int  # sample offsets into the whole audio
    end: int

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        return self.end / SAMPLE_RATE


@attrs.frozen
class WindowPlan:
    windows: tuple[Window, ...]
    skipped: tuple[tuple[float, float], ...]  # (start_s, end_s) not inside any window
    detector: str | None  # None: the audio fit in one window, or fixed cuts without a detector; CLIPS: the caller's
    note: str | None = None
    # the detector's speech, joined: the windows are cut from it (their samples are ``audio``'s) and their times
    # map back through it; None: the windows are stretches of the audio itself
    speech: SpeechMap | None = None

    def audio(self, samples: np.ndarray) -> np.ndarray:
        """What the windows' sample offsets index: ``samples``, or their speech joined."""
        return samples if self.speech is None else self.speech.joined(samples)


def clip_spans(times: Sequence[float], total: int, unit: Callable[[float], int]) -> list[tuple[int, int]]:
    """faster-whisper's ``clip_timestamps`` (seconds ``start,end,...``; an odd count runs the last clip to the end)
    as (start, end) pairs in the units ``unit`` turns seconds into (mel frames, samples), each end at most
    ``total``; no times: the whole audio."""
    points = [unit(t) for t in times] or [0]
    if len(points) % 2:
        points.append(total)
    return [(start, min(end, total)) for start, end in zip(points[::2], points[1::2])]


def clip_windows(audio: np.ndarray, times: Sequence[float], max_window_s: float = MAX_WINDOW_S) -> WindowPlan:
    """A window for each clip, as faster-whisper's batched pipeline takes ``clip_timestamps``: one chunk each, of
    at most ``max_window_s`` (the rest of a longer clip is not decoded), with no voice-activity detector."""
    limit = int(max_window_s * SAMPLE_RATE)
    clips = [(start, end) for start, end in clip_spans(times, audio.size, _samples_of) if end > start]
    windows = _numbered([(start, min(end, start + limit)) for start, end in clips])
    longer = sum(end - start > limit for start, end in clips)
    note = f"{longer} clip(s) longer than {max_window_s:g} s: only their first {max_window_s:g} s decoded" if longer \
        else None
    return WindowPlan(windows, _gaps([(w.start, w.end) for w in windows], int(audio.size)), CLIPS, note)


def outside_clips(audio: np.ndarray, times: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """The (start_s, end_s) stretches of ``audio`` that no clip covers: skipped, and reported as skipped."""
    return _gaps(clip_spans(times, audio.size, _samples_of), int(audio.size))


def _samples_of(seconds: float) -> int:
    return int(seconds * SAMPLE_RATE)  # faster-whisper's batched pipeline truncates the clips' times to samples


def plan_windows(
    audio: np.ndarray, detector: SpeechDetector | None, max_window_s: float = MAX_WINDOW_S
) -> WindowPlan:
    """The detector's speech joined and cut between its spans into windows (faster-whisper's batched pipeline);
    without a detector, audio that fits in one window is one window, longer audio cut every ``max_window_s``."""
    total = int(audio.size)
    limit = int(max_window_s * SAMPLE_RATE)
    if detector is not None:
        return SpeechMap.detect(audio, detector, max_window_s).windows(total, max_window_s, detector.name)
    if total <= limit:
        return WindowPlan((Window(0, 0, total),), (), None)
    spans = [(start, min(start + limit, total)) for start in range(0, total, limit)]
    note = (f"no voice-activity detector is installed (pip install ./plugins/silero_vad): "
            f"cut every {max_window_s:g} s, possibly inside words")
    return WindowPlan(_numbered(spans), (), None, note)


def pack_spans(spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Merge consecutive speech spans while the merged window stays within ``limit`` samples."""
    packed: list[tuple[int, int]] = []
    for start, end in spans:
        if packed and end - packed[-1][0] <= limit:
            packed[-1] = (packed[-1][0], end)
        else:
            packed.append((start, end))
    return packed


def _numbered(spans: list[tuple[int, int]]) -> tuple[Window, ...]:
    return tuple(Window(i, start, end) for i, (start, end) in enumerate(spans))


def _gaps(spans: Sequence[tuple[int, int]], total: int) -> tuple[tuple[float, float], ...]:
    """The (start_s, end_s) stretches of ``total`` samples that no span (in order, apart) covers."""
    edges = [0] + [x for span in spans for x in span] + [total]
    return tuple(
        (a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in zip(edges[::2], edges[1::2]) if b > a
    )


@attrs.frozen
class SpeechMap:
    """Speech spans cut out of long audio and joined (faster-whisper's ``vad_filter``); maps times in the joined
    audio back to the original as faster-whisper's ``restore_speech_timestamps`` does: a time belongs to the span
    whose joined end comes after it (an end time exactly at a span's end, to that span; a word, wholly to the span
    of its middle), and moves by the silence cut before that span, rounded to 10 ms."""

    spans: tuple[tuple[int, int], ...]  # (start, end) samples of the original
    # faster-whisper's batched pipeline rounds a segment's times to 1 ms before it maps them (so an end rounded past
    # its span's end moves by the next span's silence); its sequential transcribe maps them as they are
    ms_first: bool = False
    # each span's end in the joined audio (samples) and the silence cut before it (seconds), made once
    _joined: tuple[list[int], list[float]] = attrs.field(init=False, eq=False, repr=False)

    @_joined.default
    def _joined_ends(self) -> tuple[list[int], list[float]]:
        ends, silences, cut, previous = [], [], 0, 0
        for start, end in self.spans:
            cut += start - previous
            previous = end
            ends.append(end - cut)
            silences.append(cut / SAMPLE_RATE)
        return ends, silences

    @classmethod
    def detect(cls, samples: np.ndarray, detector: SpeechDetector, max_span_s: float = math.inf) -> "SpeechMap":
        """The detector's speech spans, each at most ``max_span_s`` long (the sequential loop walks the joined
        audio by its seek; the batched pipeline cuts it into windows)."""
        return cls(tuple(detector.speech_spans(samples, max_span_s)))

    def joined(self, samples: np.ndarray) -> np.ndarray:
        parts = [samples[a:b] for a, b in self.spans]
        return np.concatenate(parts) if parts else samples[:0]

    def windows(self, total: int, max_window_s: float, detector: str | None) -> WindowPlan:
        """The joined audio cut between spans into windows of at most ``max_window_s``, as faster-whisper's batched
        pipeline joins its speech chunks (``collect_chunks``), their times rounded to 1 ms before they are mapped
        back, as it rounds them; ``total``: the original's length, for what is skipped."""
        ends = self._joined[0]
        spans = list(zip([0] + ends[:-1], ends))
        windows = _numbered(pack_spans(spans, int(max_window_s * SAMPLE_RATE)))
        return WindowPlan(windows, self.skipped(total), detector, speech=attrs.evolve(self, ms_first=True))

    def span_of(self, joined_s: float, is_end: bool = False) -> int:
        ends = self._joined[0]
        sample = int(joined_s * SAMPLE_RATE)
        at = bisect.bisect_left(ends, sample)
        if is_end and at < len(ends) and ends[at] == sample:  # an end exactly at a span's end: that span
            return at
        return min(bisect.bisect(ends, sample), len(ends) - 1)

    def original_s(self, joined_s: float, is_end: bool = False, span: int | None = None) -> float:
        """The original time of a time in the joined audio (``span``: the span it is known to belong to)."""
        if not self.spans:
            return joined_s
        joined_s = round(joined_s, 3) if self.ms_first else joined_s
        span = self.span_of(joined_s, is_end) if span is None else span
        return round(self._joined[1][span] + joined_s, 2)

    def skipped(self, total: int) -> tuple[tuple[float, float], ...]:
        return _gaps(self.spans, total)

    def segments(self, segments: Sequence[Any]) -> list[Any]:
        """``segments`` (times in the joined audio) with their times in the original."""
        return [attrs.evolve(s, start_s=self.original_s(s.start_s), end_s=self.original_s(s.end_s, is_end=True))
                for s in segments]

    def words(self, words: Sequence[Any]) -> list[Any]:
        """``words`` (``start_s``, ``end_s`` in the joined audio) with their times in the original, each word's
        two times moved by the silence before the span of its middle."""
        out = []
        for word in words:
            span = self.span_of((word.start_s + word.end_s) / 2)
            out.append(attrs.evolve(word, start_s=self.original_s(word.start_s, span=span),
                                    end_s=self.original_s(word.end_s, span=span)))
        return out
