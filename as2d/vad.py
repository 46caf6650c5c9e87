"""faster-whisper's ``faster_whisper.vad``: its ``VadOptions`` and ``get_speech_timestamps``, on as2d's
voice-activity detector plugin (Silero VAD, the model and the inference faster-whisper's wheel ships)."""
from __future__ import annotations

import functools
import math

import attrs

import numpy as np

from as2d_core.contracts import SAMPLE_RATE
from as2d_core.input.audio import mono_samples
from as2d_core.input.windows import SpeechDetector
from as2d_core.setup.build import default_detector

from .objects import VadOptions

__all__ = ["VadOptions", "get_speech_timestamps", "speech_detector"]


def speech_detector(vad: VadOptions) -> SpeechDetector:
    """The installed detector with ``vad``'s options (one per set of options), its spans at most
    ``max_speech_duration_s`` long whatever its caller asks: faster-whisper's sequential ``vad_filter`` cuts longer
    speech there (at its last pause, else where it reaches the length) before it joins the spans."""
    detector = _detector(vad.threshold, vad.neg_threshold, vad.min_speech_duration_ms, vad.min_silence_duration_ms,
                         vad.speech_pad_ms)
    return detector if math.isinf(vad.max_speech_duration_s) else _Capped(detector, vad.max_speech_duration_s)


@attrs.frozen
class _Capped:
    """A detector whose spans are at most ``max_span_s`` long (the shorter of its own and the caller's)."""

    inner: SpeechDetector
    max_span_s: float

    @property
    def name(self) -> str:
        return self.inner.name

    def speech_spans(self, audio: np.ndarray, max_span_s: float) -> list[tuple[int, int]]:
        return self.inner.speech_spans(audio, min(max_span_s, self.max_span_s))


@functools.lru_cache(maxsize=8)
def _detector(threshold: float, neg_threshold: float | None, min_speech_ms: int, min_silence_ms: int,
              pad_ms: int) -> SpeechDetector:
    detector = default_detector({"threshold": threshold, "neg_threshold": neg_threshold,
                                 "min_speech_ms": min_speech_ms, "min_silence_ms": min_silence_ms, "pad_ms": pad_ms})
    if detector is None:
        raise ValueError("vad_filter needs a voice-activity detector: pip install ./plugins/silero_vad "
                         "(or vad_filter=False: longer audio is then cut every chunk_length seconds)")
    return detector


def get_speech_timestamps(audio: np.ndarray, vad_options: VadOptions | None = None,
                          sampling_rate: int = SAMPLE_RATE, **kwargs) -> list[dict]:
    """faster-whisper's ``get_speech_timestamps``: the speech spans of 16 kHz ``audio`` as
    ``{"start": sample, "end": sample}``; ``kwargs`` are ``VadOptions`` fields when no options are given."""
    if sampling_rate != SAMPLE_RATE:
        raise ValueError(f"the detector reads {SAMPLE_RATE} Hz audio, got sampling_rate={sampling_rate}")
    vad = VadOptions(**kwargs) if vad_options is None else vad_options
    samples = mono_samples(audio, "the audio samples")
    return [{"start": start, "end": end}
            for start, end in speech_detector(vad).speech_spans(samples, vad.max_speech_duration_s)]
