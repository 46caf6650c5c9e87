"""Cutting long audio into windows the models can take (at most 30 s), at pauses.

A voice-activity detector (a plugin: the core imports no model runtime) marks the
stretches of speech; consecutive stretches are packed into windows as long as the
window stays within the limit, so each cut falls in a pause the detector found.
Everything between windows is reported as skipped silence, so nothing is dropped
without the caller being told.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import numpy as np

from as2d_core.contracts import SAMPLE_RATE
from as2d_core.decode.options import CHUNK_S

MAX_WINDOW_S = float(CHUNK_S)
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
    return WindowPlan(windows, _gaps(windows, int(audio.size)), CLIPS, note)


def outside_clips(audio: np.ndarray, times: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """The (start_s, end_s) stretches of ``audio`` that no clip covers: skipped, and reported as skipped."""
    return _gaps(_numbered(clip_spans(times, audio.size, _samples_of)), int(audio.size))


def _samples_of(seconds: float) -> int:
    return int(seconds * SAMPLE_RATE)  # faster-whisper's batched pipeline truncates the clips' times to samples


def plan_windows(
    audio: np.ndarray, detector: SpeechDetector | None, max_window_s: float = MAX_WINDOW_S
) -> WindowPlan:
    """Windows covering all detected speech; audio that fits in one window is one window, undetected."""
    total = int(audio.size)
    limit = int(max_window_s * SAMPLE_RATE)
    if total <= limit:
        return WindowPlan((Window(0, 0, total),), (), None)
    if detector is None:
        spans = [(start, min(start + limit, total)) for start in range(0, total, limit)]
        note = (f"no voice-activity detector is installed (pip install ./plugins/silero_vad): "
                f"cut every {max_window_s:g} s, possibly inside words")
        return WindowPlan(_numbered(spans), (), None, note)
    spans = [span for start, end in detector.speech_spans(audio, max_window_s) for span in _split(start, end, limit)]
    windows = _numbered(pack_spans(spans, limit))
    return WindowPlan(windows, _gaps(windows, total), detector.name)


def pack_spans(spans: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Merge consecutive speech spans while the merged window stays within ``limit`` samples."""
    packed: list[tuple[int, int]] = []
    for start, end in spans:
        if packed and end - packed[-1][0] <= limit:
            packed[-1] = (packed[-1][0], end)
        else:
            packed.append((start, end))
    return packed


def _split(start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """A span the detector left too long, in equal parts (detectors normally cut at pauses themselves)."""
    parts = -(-(end - start) // limit)
    bounds = np.linspace(start, end, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _numbered(spans: list[tuple[int, int]]) -> tuple[Window, ...]:
    return tuple(Window(i, start, end) for i, (start, end) in enumerate(spans))


def _gaps(windows: tuple[Window, ...], total: int) -> tuple[tuple[float, float], ...]:
    edges = [0] + [x for w in windows for x in (w.start, w.end)] + [total]
    return tuple(
        (a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in zip(edges[::2], edges[1::2]) if b > a
    )
