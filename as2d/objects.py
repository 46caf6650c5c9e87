"""faster-whisper's objects, field for field: what ``as2d.WhisperModel.transcribe`` returns and takes."""
from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field

from as2d_core.input.seek import LONG_FORM_VAD
from as2d_core.input.windows import WINDOWS_VAD as BATCHED


class _NamedTupleDict:
    """``_asdict()``, which code written when faster-whisper's segments and words were named tuples still calls;
    faster-whisper keeps it, deprecated, and so does as2d."""

    def _asdict(self) -> dict:
        name = type(self).__name__
        warnings.warn(f"{name}._asdict() is deprecated, as in faster-whisper: use dataclasses.asdict({name})",
                      DeprecationWarning, stacklevel=2)
        return asdict(self)


@dataclass
class Word(_NamedTupleDict):
    start: float
    end: float
    word: str
    probability: float


@dataclass
class Segment(_NamedTupleDict):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float  # its request's, as faster-whisper's: its tokens and end token over len(tokens) + 1
    compression_ratio: float
    no_speech_prob: float  # its request's: the no-speech token at the start of its transcript
    words: list[Word] | None
    temperature: float | None


@dataclass
class VadOptions:
    """The voice-activity detector's options (the Silero VAD plugin's), in faster-whisper's order, with its defaults
    for its sequential ``transcribe(vad_filter=True)``: speech split at pauses of 2 s, padded by 0.4 s, spans as long
    as the speech runs. The batched pipeline starts from ``WINDOWS_VAD`` instead."""

    threshold: float = LONG_FORM_VAD["threshold"]
    neg_threshold: float | None = None  # silence below it; None: threshold - 0.15, as faster-whisper's
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: int = LONG_FORM_VAD["min_silence_ms"]
    speech_pad_ms: int = LONG_FORM_VAD["pad_ms"]


# the windows route's (``BatchedInferencePipeline``'s) defaults, faster-whisper 1.2.1's batched pipeline's: speech
# split at pauses of 0.16 s, padded by 0.4 s, spans of at most a window (its 30 s chunk), joined into windows
WINDOWS_VAD = VadOptions(threshold=BATCHED["threshold"], min_silence_duration_ms=BATCHED["min_silence_ms"],
                         speech_pad_ms=BATCHED["pad_ms"], max_speech_duration_s=30.0)


@dataclass
class TranscriptionOptions:
    beam_size: int
    best_of: int
    patience: float
    length_penalty: float
    repetition_penalty: float
    no_repeat_ngram_size: int
    log_prob_threshold: float | None
    no_speech_threshold: float | None
    compression_ratio_threshold: float | None
    condition_on_previous_text: bool
    prompt_reset_on_temperature: float
    temperatures: list[float]
    initial_prompt: str | None
    prefix: str | None
    suppress_blank: bool
    suppress_tokens: list[int] | None
    without_timestamps: bool
    max_initial_timestamp: float
    word_timestamps: bool
    prepend_punctuations: str
    append_punctuations: str
    multilingual: bool
    max_new_tokens: int | None
    clip_timestamps: str | list[float]
    hallucination_silence_threshold: float | None
    hotwords: str | None


@dataclass
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: TranscriptionOptions
    vad_options: VadOptions | None
    # as2d's own: whether the temperature fallback was on (more than one temperature), and what else differs
    # from faster-whisper, in words
    temperature_fallback: bool = False
    notes: list[str] = field(default_factory=list)
    # as2d's own: how the file is decoded (route, wave_size, drafts, why: as2d run --json's ``route``)
    route: dict | None = None


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """faster-whisper's ``format_timestamp``: ``[HH:]MM:SS.mmm``."""
    if seconds < 0:
        raise ValueError(f"non-negative timestamp expected, got {seconds}")
    milliseconds = round(seconds * 1000.0)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    seconds, milliseconds = divmod(milliseconds, 1_000)
    hours_marker = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_marker}{minutes:02d}:{seconds:02d}{decimal_marker}{milliseconds:03d}"
