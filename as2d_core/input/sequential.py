"""A whole file by Whisper's long-form rules (``seek``) on a pipeline's resident models, checked if asked.

The pipeline's method decodes every request (each attempt of the temperature fallback, in its mode); with
``check`` the same loop runs again with target-only decoding, and each request's tokens are compared: since
every decision of the loop is taken on exact tokens, both runs make the same requests.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Protocol

import attrs
import numpy as np

from as2d_core.capabilities import FeatureList, LanguageDetector
from as2d_core.contracts import Recording, Request, Target, TokenPrompt
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.result import DecodeResult
from as2d_core.input.seek import SeekStep, seek_steps
from as2d_core.input.transcript import WindowResult
from as2d_core.input.windows import SpeechDetector, SpeechMap, Window


class Decoding(Protocol):
    """What the loop needs of a pipeline (``Pipeline``): its target, its requests, its two ways of decoding one
    (``words=False``: the loop times the words of the segments it keeps), its decoding of a request's samples
    together (the same for every method: the temperature fallback's) and its timing of words."""

    target: Target

    def request(self, request_id: str, samples: np.ndarray, previous_text: str | TokenPrompt | None = None
                ) -> Request: ...

    def decode(self, request: Request, options=None, on_commit=None, method=None, words: bool = True
               ) -> DecodeResult: ...

    def reference(self, request: Request, words: bool = True) -> DecodeResult: ...

    def decode_samples(self, request: Request, seeds: list[int]) -> list[DecodeResult]: ...

    def time_words(self, request: Request, result: DecodeResult, tokens: list[int],
                   last_speech_s: float) -> DecodeResult: ...


def speech_only(samples: np.ndarray, detector: SpeechDetector | None) -> tuple[np.ndarray, SpeechMap | None]:
    """The audio the loop walks: all of it, or with ``detector`` (``vad_filter``) its speech joined."""
    if detector is None:
        return samples, None
    speech = SpeechMap.detect(samples, detector)
    return speech.joined(samples), speech


def fitted_mode(target: Target, mode: DecodeOptions) -> tuple[DecodeOptions, list[str]]:
    """The mode as ``target`` can run it, and what was left out: a target without timestamps seeks by whole
    requests (as faster-whisper's ``without_timestamps``), one that cannot sample has no temperature fallback;
    clips leave the voice-activity detector out, and the hallucination rule needs word timestamps."""
    offered = target.features if isinstance(target, FeatureList) else frozenset()
    notes = []
    if mode.timestamps != "none" and "timestamps" not in offered:
        mode = attrs.evolve(mode, timestamps="none")
        notes.append(f"target {target.name} decodes no timestamps: each long-form request moves the seek 30 s on")
    if len(mode.temperature) > 1 and "sampling" not in offered:
        mode = attrs.evolve(mode, temperature=mode.temperature[:1])
        notes.append(f"target {target.name} does not sample: no temperature fallback")
    if mode.vad_filter and mode.clip_timestamps:
        notes.append("vad_filter not used: clip_timestamps names the audio to decode (faster-whisper ignores it too)")
    if mode.hallucination_silence_threshold is not None and not mode.word_timestamps:
        notes.append("hallucination_silence_threshold not used: it reads the word timestamps (word_timestamps=True), "
                     "as faster-whisper's does")
    return mode, notes


def long_form_steps(pipeline: Decoding, audio: np.ndarray, request_id: str, mode: DecodeOptions,
                    decode: Callable[[Request], DecodeResult] | None = None,
                    recording: Recording | None = None) -> Iterator[SeekStep]:
    """The loop's requests on ``audio``, each decoded (by ``decode``, default the pipeline's method, without the
    words, which the loop times on the segments it keeps) when reached; ``recording``: ``audio`` as a ``Recording``
    another request already used (its features are kept there)."""

    mode, _notes = fitted_mode(pipeline.target, mode)

    recording = recording or Recording(audio)  # features over the whole recording, as faster-whisper's
    # a request that names no language: the language the target detects on the first request is every later one's
    # (faster-whisper reads it once, from the 30 s the first request decodes), unless ``multilingual`` asks for each
    detected: list[str] = []
    detect_once = not mode.multilingual and isinstance(pipeline.target, LanguageDetector)

    def make(window: Window, previous: TokenPrompt | None, first: bool) -> Request:
        request = pipeline.request(f"{request_id}-s{window.index:03d}", audio[window.start : window.end],
                                   previous_text=previous)
        if detected:
            request = attrs.evolve(request, language=detected[0])
        if not first:
            request = attrs.evolve(request, prompt=None)
        if window.start != 0:  # faster-whisper forces the prefix on the request at seek 0 alone
            request = attrs.evolve(request, prefix=None)
        # timestamps unless turned off (faster-whisper's without_timestamps): they are what the seek follows
        return attrs.evolve(request, timestamps="none" if mode.timestamps == "none" else "segment",
                            recording=recording, offset=window.start)

    decode = decode or functools.partial(pipeline.decode, words=False)
    steps = seek_steps(audio, make, decode, mode, pipeline.target.vocabulary, initial_prompt=True,
                       time_words=pipeline.time_words if mode.word_timestamps else None,
                       decode_samples=pipeline.decode_samples)
    try:
        for step in steps:  # the next request is made only after this one is handed out
            if detect_once and not detected:
                detected.append(step.result.language)
            yield step
    finally:
        steps.close()


def window_result(step: SeekStep, speech: SpeechMap | None, reference: SeekStep | None = None) -> WindowResult:
    return WindowResult(step.window, step.result, None if reference is None else reference.result, step.silent,
                        step.attempt.temperature, len(step.attempts), speech)


def sequential_windows(pipeline: Decoding, samples: np.ndarray, request_id: str, mode: DecodeOptions,
                       detector: SpeechDetector | None, check: bool, on_text: Callable[[str], None] | None = None,
                       on_progress: Callable[[float], None] | None = None,
                       decode: Callable[[Request], DecodeResult] | None = None,
                       ) -> tuple[list[WindowResult], SpeechMap | None, list[str]]:
    """Every request of the loop as a window result (the references' tokens beside them with ``check``), the
    speech map with ``detector`` (faster-whisper's ``vad_filter``), and notes. ``on_text`` hears each request's
    kept text when the request is done, pieces that spell the transcript's text; ``on_progress`` the file's time
    each request ends at (the next one may start before it); ``decode``: each request's decode (``long_form_steps``)."""
    audio, speech = speech_only(samples, detector)
    notes = fitted_mode(pipeline.target, mode)[1]
    if audio.size == 0:
        return [], speech, ["the voice-activity detector found no speech"]
    recording = Recording(audio)  # its whole-file features, computed once for the method and the check
    steps: list[SeekStep] = []
    said = False  # whether on_text has heard a piece yet
    for step in long_form_steps(pipeline, audio, request_id, mode, decode, recording):
        text = step.result.text.strip()
        if on_text is not None and text:
            on_text((" " if said else "") + text)
            said = True
        steps.append(step)
        if on_progress is not None:
            on_progress(window_result(step, speech).end_s)
    references: list[SeekStep | None] = [None] * len(steps)
    if check:
        checked = list(long_form_steps(pipeline, audio, request_id, mode,
                                       functools.partial(pipeline.reference, words=False), recording))
        if len(checked) != len(steps):
            notes.append(f"target-only decoding made {len(checked)} requests, this method {len(steps)}")
        references = [*checked[: len(steps)], *references[len(checked):]]  # None where the check made fewer
        for step, reference in zip(steps, references):  # every attempt, not only the kept one, must be exact
            ours, theirs = ([a.result.tokens for a in x.attempts] for x in (step, reference or step))
            if ours != theirs:
                notes.append(f"request {step.window.index}: an attempt of the fallback differs from target-only's")
    return [window_result(s, speech, r) for s, r in zip(steps, references)], speech, notes
