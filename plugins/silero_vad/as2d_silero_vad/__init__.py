"""Silero VAD as an as2d speech detector.

The model is the ``silero_vad_v6.onnx`` that faster-whisper's wheel ships, run by faster-whisper's
own Silero inference on ONNX Runtime; nothing is downloaded.
"""
from __future__ import annotations

import numpy as np

from as2d_core.contracts import SAMPLE_RATE

NAME = "silero-vad"


class SileroDetector:
    """Speech spans padded by ``pad_ms`` and split at pauses of at least ``min_silence_ms``; speech where the
    probability is over ``threshold`` (and stays so until it falls under ``neg_threshold``), spans shorter than
    ``min_speech_ms`` dropped: faster-whisper's VAD options under the names ``hookspecs.DETECTOR_OPTIONS``."""

    name = NAME

    def __init__(self, threshold: float = 0.5, min_silence_ms: int = 500, pad_ms: int = 300,
                 neg_threshold: float | None = None, min_speech_ms: int = 0) -> None:
        from faster_whisper.vad import VadOptions, get_vad_model

        get_vad_model()  # load now, so a missing model or runtime fails at construction
        self._options = dict(threshold=threshold, neg_threshold=neg_threshold, min_speech_duration_ms=min_speech_ms,
                             min_silence_duration_ms=min_silence_ms, speech_pad_ms=pad_ms)
        self._vad_options = VadOptions

    def speech_spans(self, audio: np.ndarray, max_span_s: float) -> list[tuple[int, int]]:
        from faster_whisper.vad import get_speech_timestamps

        options = self._vad_options(max_speech_duration_s=max_span_s, **self._options)
        spans = get_speech_timestamps(np.asarray(audio, dtype=np.float32), options, sampling_rate=SAMPLE_RATE)
        return [(int(s["start"]), int(s["end"])) for s in spans]

