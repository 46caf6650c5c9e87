"""faster-whisper's ``transcribe`` options, read as as2d's decoding options; what as2d does not do is refused.

Every option that changes the tokens and that as2d has means what it means in faster-whisper, with the same
default: beams, the temperature fallback and its thresholds, ``best_of``, conditioning on previous text and its
reset, ``vad_filter``, ``clip_timestamps``, ``chunk_length``, ``hallucination_silence_threshold``,
``max_new_tokens``, ``initial_prompt`` (text or token ids), ``prefix`` and the edits of the scores
(``suppress_blank``, ``suppress_tokens``, ``max_initial_timestamp``, ``repetition_penalty``,
``no_repeat_ngram_size``). One that as2d does not have is refused with a ValueError naming it and why: never
ignored.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import attrs

from as2d_core.contracts import TokenPrompt
from as2d_core.decode.options import DecodeOptions, temperatures

from .objects import WINDOWS_VAD, TranscriptionOptions, VadOptions

# faster-whisper's transcribe() option -> as2d's decoding option of the same meaning (the same name unless given)
AS_DECODE_OPTIONS = {"beam_size": "beam_size", "best_of": "best_of", "patience": "patience",
                     "length_penalty": "length_penalty", "temperature": "temperature",
                     "compression_ratio_threshold": "compression_ratio_threshold",
                     "log_prob_threshold": "log_prob_threshold", "no_speech_threshold": "no_speech_threshold",
                     "condition_on_previous_text": "condition_on_previous_text", "multilingual": "multilingual",
                     "prompt_reset_on_temperature": "prompt_reset_on_temperature", "initial_prompt": "prompt",
                     "hotwords": "hotwords", "word_timestamps": "word_timestamps", "vad_filter": "vad_filter",
                     "clip_timestamps": "clip_timestamps",
                     "hallucination_silence_threshold": "hallucination_silence_threshold",
                     "max_new_tokens": "max_new_tokens", "prefix": "prefix", "suppress_blank": "suppress_blank",
                     "suppress_tokens": "suppress_tokens", "max_initial_timestamp": "max_initial_timestamp",
                     "repetition_penalty": "repetition_penalty", "no_repeat_ngram_size": "no_repeat_ngram_size",
                     "prepend_punctuations": "prepend_punctuations", "append_punctuations": "append_punctuations",
                     "chunk_length": "chunk_length"}


def refuse(name: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{name}={value!r} is not supported: {why}")


def check_options(given: dict[str, Any]) -> None:
    """Refuse every option whose value asks for something as2d does not do (a ValueError naming it and why)."""
    if given["language_detection_segments"] < 1:
        raise ValueError(f"language_detection_segments must be at least 1, got {given['language_detection_segments']}")
    if given["task"] not in ("transcribe", "translate"):
        raise ValueError(f"unknown task {given['task']!r}; choose 'transcribe' or 'translate'")
    if given["vad_parameters"] is not None and not given["vad_filter"]:
        raise ValueError("vad_parameters need vad_filter=True (they configure the voice-activity detector)")


def clip_seconds(clips: str | list | None) -> str | list[float]:
    """``clip_timestamps`` as the sequential ``transcribe`` takes it (``"0"``, ``"start,end,..."``, seconds), from
    that or from the batched pipeline's list of ``{"start": s, "end": s}``."""
    if not clips:
        return "0"
    if isinstance(clips, (list, tuple)) and all(isinstance(clip, dict) for clip in clips):
        if any(set(clip) != {"start", "end"} for clip in clips):
            raise ValueError(f"clip_timestamps as dicts need 'start' and 'end' (seconds) each, got {clips!r}")
        return [float(clip[key]) for clip in clips for key in ("start", "end")]
    return clips


def initial_prompt(prompt: str | Iterable[int] | None, vocabulary: str) -> str | TokenPrompt | None:
    """faster-whisper's ``initial_prompt``: text, or token ids of the model's ``vocabulary`` taken as they are (no
    ids: no prompt)."""
    if prompt is None or isinstance(prompt, str):
        return prompt
    try:
        ids = TokenPrompt(vocabulary, prompt)
    except (TypeError, ValueError):
        raise ValueError(f"initial_prompt must be text or token ids, got {prompt!r}") from None
    return ids if ids.tokens else None


def decode_options(given: dict[str, Any], base: DecodeOptions, vocabulary: str) -> DecodeOptions:
    """``base`` (the model's threads, its route) with the call's decoding mode, the prompt's ids read as of the
    target's ``vocabulary``; a value out of range is a ValueError naming the option."""
    values = {ours: given[theirs] for theirs, ours in AS_DECODE_OPTIONS.items()}
    values["prompt"] = initial_prompt(given["initial_prompt"], vocabulary)
    if values["chunk_length"] is None:  # faster-whisper's None: its feature extractor's 30 s
        values["chunk_length"] = base.chunk_length
    values["clip_timestamps"] = clip_seconds(given["clip_timestamps"])
    values["timestamps"] = "none" if given["without_timestamps"] else "segment"
    return attrs.evolve(base, **values)


def vad_options(parameters: dict | Any | None, decode: DecodeOptions) -> VadOptions:
    """The detector's options from faster-whisper's ``vad_parameters`` (a dict or its ``VadOptions``), over the
    route's defaults: faster-whisper's sequential ones on the seek route, ``WINDOWS_VAD`` on the windows route,
    whose spans are at most a window (``chunk_length``) long whatever is given (as faster-whisper's batched
    pipeline caps them)."""
    route = decode.route
    base = dataclasses.replace(WINDOWS_VAD, max_speech_duration_s=float(decode.chunk_length)) \
        if route == "windows" else VadOptions()
    if parameters is None:
        return base
    given = dict(parameters) if isinstance(parameters, dict) else (
        dataclasses.asdict(parameters) if dataclasses.is_dataclass(parameters) else dict(vars(parameters)))
    ours = {f.name for f in dataclasses.fields(VadOptions)}
    if route == "windows":
        given.pop("max_speech_duration_s", None)
    unknown = [name for name in given if name not in ours]
    if unknown:
        raise ValueError(f"unknown VAD parameter {unknown[0]!r}; as2d's detector takes {', '.join(sorted(ours))}")
    longest = given.get("max_speech_duration_s", base.max_speech_duration_s)
    if isinstance(longest, bool) or not isinstance(longest, (int, float)) or not longest > 0:
        raise ValueError(f"vad_parameters['max_speech_duration_s'] must be seconds above 0, got {longest!r}")
    return dataclasses.replace(base, **given)


def transcription_options(given: dict[str, Any], decode: DecodeOptions) -> TranscriptionOptions:
    """faster-whisper's options record, with the temperatures as2d decodes at (the windows route: the first)."""
    names = {f.name for f in dataclasses.fields(TranscriptionOptions)}
    values = {k: v for k, v in given.items() if k in names}
    used = list(temperatures(given["temperature"]))
    values.update(temperatures=used if decode.route == "seek" else used[:1],
                  suppress_tokens=list(given["suppress_tokens"] or []))
    return TranscriptionOptions(**values)
