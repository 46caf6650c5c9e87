"""faster-whisper's ``BatchedInferencePipeline`` on as2d: ``from as2d import BatchedInferencePipeline``.

faster-whisper's batched pipeline decodes a file's speech chunks side by side, ``batch_size`` at a time,
each chunk on its own (no previous text, no temperature fallback). as2d's batched route does the same with
its windows: ``DecodeOptions.batch_windows`` windows decoded in waves, each window in a thread of its own,
their verifications made in one call of the target's windows graph, and each window's tokens still exactly
its own greedy output. The segments and the info are ``WhisperModel.transcribe``'s, which this runs.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import BinaryIO

import attrs
import numpy as np

from as2d_core.setup.options import bounds

from .transcribe import DEFAULT_PUNCTUATION, DEFAULT_TEMPERATURES, Segment, TranscriptionInfo, VadOptions, WhisperModel


class BatchedInferencePipeline:
    """Windows of one file decoded side by side over a loaded ``WhisperModel`` (which keeps serving alone)."""

    def __init__(self, model: WhisperModel):
        if not isinstance(model, WhisperModel):
            raise TypeError(f"BatchedInferencePipeline takes an as2d WhisperModel, not {type(model).__name__}")
        self.model = model

    def transcribe(
        self,
        audio: str | BinaryIO | np.ndarray,
        language: str | None = None,
        task: str = "transcribe",
        log_progress: bool = False,
        beam_size: int = 1,
        best_of: int = 5,
        patience: float = 1,
        length_penalty: float = 1,
        repetition_penalty: float = 1,
        no_repeat_ngram_size: int = 0,
        temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
        compression_ratio_threshold: float | None = 2.4,
        log_prob_threshold: float | None = -1.0,
        no_speech_threshold: float | None = 0.6,
        condition_on_previous_text: bool = True,
        prompt_reset_on_temperature: float = 0.5,
        initial_prompt: str | Iterable[int] | None = None,
        prefix: str | None = None,
        suppress_blank: bool = True,
        suppress_tokens: list[int] | None = (-1,),
        without_timestamps: bool = True,
        max_initial_timestamp: float = 1.0,
        word_timestamps: bool = False,
        prepend_punctuations: str = DEFAULT_PUNCTUATION[0],
        append_punctuations: str = DEFAULT_PUNCTUATION[1],
        multilingual: bool = False,
        vad_filter: bool = True,
        vad_parameters: dict | VadOptions | None = None,
        max_new_tokens: int | None = None,
        chunk_length: int | None = None,
        clip_timestamps: list[dict] | None = None,
        hallucination_silence_threshold: float | None = None,
        batch_size: int = 8,
        hotwords: str | None = None,
        language_detection_threshold: float | None = 0.5,
        language_detection_segments: int = 1,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """faster-whisper's batched ``transcribe``: up to ``batch_size`` windows decoded at once.

        As in faster-whisper's batched pipeline, no window is conditioned on the text before it
        (``condition_on_previous_text`` is taken and set off) and only the first temperature is used (no
        fallback); ``without_timestamps`` is on by default, so each window is one segment. Greedy decoding
        (``beam_size=1``, the default here), as ``WhisperModel.transcribe``.
        """
        low, high = bounds("batch_windows")
        if not isinstance(batch_size, int) or not low <= batch_size <= high:
            raise ValueError(f"batch_size must be a whole number from {low} to {high} (windows decoded side by "
                             f"side), got {batch_size!r}")
        first_temperature = temperature[0] if isinstance(temperature, (list, tuple)) else temperature
        side_by_side = copy.copy(self.model)  # the same loaded parts, lock and detectors; its own decoding options
        side_by_side.decode_options = attrs.evolve(self.model.decode_options, batch_windows=batch_size)
        return side_by_side.transcribe(
            audio, language=language, task=task, log_progress=log_progress, beam_size=beam_size, best_of=best_of,
            patience=patience, length_penalty=length_penalty, repetition_penalty=repetition_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size, temperature=first_temperature,
            compression_ratio_threshold=compression_ratio_threshold, log_prob_threshold=log_prob_threshold,
            no_speech_threshold=no_speech_threshold, condition_on_previous_text=False,
            prompt_reset_on_temperature=prompt_reset_on_temperature, initial_prompt=initial_prompt, prefix=prefix,
            suppress_blank=suppress_blank, suppress_tokens=suppress_tokens, without_timestamps=without_timestamps,
            max_initial_timestamp=max_initial_timestamp, word_timestamps=word_timestamps,
            prepend_punctuations=prepend_punctuations, append_punctuations=append_punctuations,
            multilingual=multilingual, vad_filter=vad_filter, vad_parameters=vad_parameters,
            max_new_tokens=max_new_tokens, chunk_length=chunk_length,
            clip_timestamps="0" if clip_timestamps is None else clip_timestamps,
            hallucination_silence_threshold=hallucination_silence_threshold, hotwords=hotwords,
            language_detection_threshold=language_detection_threshold,
            language_detection_segments=language_detection_segments)
