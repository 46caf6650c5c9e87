"""Whisper's long-form transcription: 30 s segments decoded with timestamps, each starting where the last ended.

This is faster-whisper's sequential ``transcribe`` (openai-whisper's loop): a *seek* offset walks the
audio. At each step the 30 s after it (``chunk_length``) are one request, decoded in the timestamp mode with the
temperature fallback (``decode.fallback``); its segments are kept up to the last complete timestamp pair, and the seek
moves to that timestamp, so speech after a response that ended early, or one cut off mid-segment, is
decoded again in the next request instead of being lost. A response that ends on a single timestamp (the
model saw no more speech) or has no complete pair moves the seek a whole segment on. With conditioning,
each request's prompt is the tokens kept since the last reset, timestamps included, reset after a hot fallback.

Each request is one exact decode call of the pipeline's method, so the whole transcript equals target-only
decoding's in the same mode: every decision of the loop is taken on the same tokens.
"""
from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from as2d_core.contracts import SAMPLE_RATE, Request, TokenPrompt
from as2d_core.decode.fallback import Attempt, DecodeSamples, decode_with_fallback, is_silence
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.timestamps import TIME_PRECISION_S, Segment, marked_up
from as2d_core.decode.words import speech_end_s, words_by_segment
from as2d_core.input.hallucinations import hallucination_cut
from as2d_core.input.windows import Window, clip_spans

HOP = SAMPLE_RATE // 100  # one mel frame: the unit of the seek
FRAMES_PER_TIMESTAMP = round(TIME_PRECISION_S * 100)


@attrs.define
class SeekStep:
    """One request of the loop: its span of the audio, the attempt kept, every attempt made, and what was kept."""

    window: Window  # the request's audio, in samples of the audio the loop walked
    attempt: Attempt
    attempts: list[Attempt]
    result: DecodeResult  # the kept attempt's result, its segments and text those the loop kept
    silent: bool  # dropped by the no-speech rule: nothing kept, the seek moved a whole segment on


def kept_segments(result: DecodeResult, segment_frames: int) -> tuple[list[Segment], int]:
    """The segments faster-whisper keeps of a timestamped response and how many frames the seek moves on.

    With a complete timestamp pair inside the response (``<|a|><|a|>``), a last segment that no timestamp
    closes is left for the next request, which starts at the pair's time; else everything is kept as one segment
    from the request's start to its last timestamp (to its end if it has none past 0), whatever timestamp opened
    it, and the seek moves ``segment_frames`` on.
    """
    if result.timestamp_ids is None:  # without timestamps (faster-whisper's without_timestamps) all is kept
        return list(result.segments), segment_frames
    begin = result.timestamp_ids[0]
    tokens = result.tokens
    pairs = [i for i in range(1, len(tokens)) if tokens[i] >= begin and tokens[i - 1] >= begin]
    segments = list(result.segments)
    if not pairs:
        stamps = [t for t in tokens if t >= begin]
        end = (stamps[-1] - begin) * TIME_PRECISION_S if stamps and stamps[-1] != begin else \
            segment_frames * HOP / SAMPLE_RATE
        return ([Segment(0.0, end, result.text, tuple(tokens))] if result.text.strip() else []), segment_frames
    if ends_on_single_timestamp(result):
        return segments, segment_frames
    if segments and segments[-1].tokens[-1] < begin:  # the unfinished segment is decoded again
        segments.pop()
    return segments, (tokens[pairs[-1] - 1] - begin) * FRAMES_PER_TIMESTAMP


def ends_on_single_timestamp(result: DecodeResult) -> bool:
    """Whether a timestamped response's text ends on one timestamp: the model saw no speech after it."""
    if result.timestamp_ids is None:
        return False
    begin, tokens = result.timestamp_ids[0], result.tokens
    return len(tokens) >= 2 and tokens[-2] < begin <= tokens[-1]


# with word timestamps: (request, its kept result, the kept segments' tokens, where the speech before them ended in
# seconds of the walked audio) -> the result with its words and its segments' times as they fit them
TimeWords = Callable[[Request, DecodeResult, list[int], float], DecodeResult]


def seek_steps(samples: np.ndarray, make_request: Callable[[Window, TokenPrompt | None, bool], Request],
               decode: Callable[[Request], DecodeResult], mode: DecodeOptions, vocabulary: str,
               initial_prompt: bool = False, time_words: TimeWords | None = None,
               decode_samples: DecodeSamples | None = None):
    """Walk ``samples`` as faster-whisper's sequential transcription does, yielding each :class:`SeekStep`.

    ``make_request(window, previous_text, first)`` builds the request on ``samples[window.start : window.end]``
    (``previous_text``: with conditioning, the tokens kept since the last reset, of the target's ``vocabulary``;
    ``first``: the user's prompt, if any, still applies); ``decode`` decodes one request in its mode (greedy,
    sampled or beam search); ``decode_samples``, if given, a fallback temperature's ``best_of`` samples together.
    With ``time_words`` (word timestamps) the kept segments' words are timed, and, as faster-whisper does, the
    seek moves to the last word's end unless the response ended on a single timestamp.
    """
    content_frames = samples.size // HOP
    segment_frames = mode.chunk_length * SAMPLE_RATE // HOP  # faster-whisper's feature extractor's nb_max_frames
    index = 0
    history: list[TokenPrompt] = []  # the kept segments since the last prompt reset
    last_speech_s = 0.0  # with word timestamps: where the speech of the kept segments so far ended
    prompt_on = initial_prompt
    # each clip (clip_timestamps; the whole audio by default) walked from its start, the text carried across them
    for seek, clip_end in clip_spans(mode.clip_timestamps, content_frames, lambda s: round(s * SAMPLE_RATE / HOP)):
        while seek < clip_end:
            size = min(segment_frames, clip_end - seek)
            last = seek + size >= content_frames  # the last request also takes the samples after the last whole frame
            window = Window(index, seek * HOP, samples.size if last else (seek + size) * HOP)
            fed = [t for h in history for t in h.tokens] if mode.condition_on_previous_text else []
            previous = TokenPrompt(vocabulary, fed, "".join(h.text for h in history)) if fed else None
            request = make_request(window, previous, prompt_on)
            attempt, attempts = decode_with_fallback(request, decode, mode, seek, decode_samples)
            result = attempt.result
            if is_silence(attempt, mode):
                yield SeekStep(window, attempt, attempts, attrs.evolve(result, segments=[], text=""), True)
                seek, index = seek + size, index + 1
                continue
            segments, advance = kept_segments(result, size)
            kept = attrs.evolve(result, segments=segments, text="".join(s.text for s in segments))
            if time_words is not None:
                kept = time_words(request, kept, [t for s in segments for t in s.tokens], last_speech_s)
                end = speech_end_s(kept)
                if end is not None and end > 0 and not ends_on_single_timestamp(result):
                    advance = round((window.start_s + end) * SAMPLE_RATE / HOP) - seek
                cut = None if mode.hallucination_silence_threshold is None else hallucination_cut(
                    kept.segments, words_by_segment(kept.segments, kept.words or []), seek, size, last_speech_s,
                    mode.hallucination_silence_threshold, content_frames, mode.chunk_length)
                if cut is not None and cut.whole:  # nothing of it is given, nor prompts the next request
                    yield SeekStep(window, attempt, attempts, only_segments(kept, segments, [])[0], False)
                    seek, index = max(cut.seek, seek + 1), index + 1
                    continue
                if cut is not None:
                    kept, segments = only_segments(kept, segments, range(cut.keep))
                    advance = cut.seek - seek
                end = speech_end_s(kept)
                last_speech_s = last_speech_s if end is None else window.start_s + end
            kept, segments = without_empty_segments(kept, segments, time_words is not None)
            yield SeekStep(window, attempt, attempts, kept, False)
            if not mode.condition_on_previous_text or attempt.temperature > mode.prompt_reset_on_temperature:
                history, prompt_on = [], False
            else:
                # the kept tokens as decoded, as faster-whisper feeds them back (timestamps included where it decoded
                # some), and as marked-up text for a drafter of another vocabulary
                text = marked_up(segments, result.timestamp_ids[0]) if result.timestamp_ids else \
                    "".join(s.text for s in segments)
                history.append(TokenPrompt(vocabulary, [t for s in segments for t in s.tokens], text))
            seek, index = seek + max(advance, 1), index + 1


def without_empty_segments(kept: DecodeResult, segments: list[Segment], timed: bool
                           ) -> tuple[DecodeResult, list[Segment]]:
    """The kept result and its segments as decoded, less those that start where they end, which faster-whisper
    neither gives nor feeds to the next prompt: by their timestamps, or with word timestamps by their words'
    times (their words go with them)."""
    begin = kept.timestamp_ids[0] if kept.timestamp_ids else None

    def empty(decoded: Segment, fitted: Segment) -> bool:
        if timed:
            return fitted.start_s == fitted.end_s
        return begin is not None and decoded.tokens[0] >= begin and decoded.tokens[0] == decoded.tokens[-1]

    drop = [empty(decoded, fitted) for decoded, fitted in zip(segments, kept.segments)]
    if not any(drop):
        return kept, segments
    return only_segments(kept, segments, [i for i, out in enumerate(drop) if not out])


def only_segments(kept: DecodeResult, segments: list[Segment], chosen) -> tuple[DecodeResult, list[Segment]]:
    """The kept result and its segments as decoded, with only the ``chosen`` segments (indices) and their words."""
    chosen = set(chosen)
    words = words_by_segment(kept.segments, kept.words) if kept.words else [[] for _ in segments]
    fitted = [s for i, s in enumerate(kept.segments) if i in chosen]
    kept = attrs.evolve(kept, segments=fitted, text="".join(s.text for s in fitted),
                        words=[w for i, group in enumerate(words) if i in chosen for w in group])
    return kept, [s for i, s in enumerate(segments) if i in chosen]


# faster-whisper's VadOptions defaults, which its sequential transcribe(vad_filter=True) uses (the detector's option
# names, ``hookspecs.DETECTOR_OPTIONS``): speech split at pauses of 2 s, padded by 0.4 s, spans as long as the speech
# (``SpeechMap.detect``); the windows route takes its batched pipeline's (``windows.WINDOWS_VAD``)
LONG_FORM_VAD = {"threshold": 0.5, "min_silence_ms": 2000, "pad_ms": 400}
