"""faster-whisper's ``hallucination_silence_threshold``: with word timestamps, skip the silence before a made-up
segment.

Whisper invents text in long silences. Its words then look wrong: improbable, very short or very long. A
segment whose first words look so and that silence surrounds (a gap over the threshold, or the request's
edges) is dropped with what follows it in its request, and the seek moves to its start, so the next request
decodes from there; a request whose first timed segment looks so after a gap over the threshold is dropped
whole and decoded again from after the gap. The rules and their numbers are faster-whisper's (openai-whisper's),
applied to the same timed words, so the loop makes faster-whisper's requests; every request is still an
exact decode, so the seek stays the same for as2d and target-only.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs

from as2d_core.capabilities import Word
from as2d_core.decode.timestamps import Segment

PUNCTUATION = "\"'“¿([{-\"'.。,，!！?？:：”)]}、"  # a word found in this text scores nothing (faster-whisper's test)
FRAMES_PER_S = 100  # the seek's unit: mel frames


def word_anomaly(word: Word) -> float:
    """How made-up a word looks: improbable (under 0.15), shorter than 0.133 s or longer than 2 s."""
    duration = word.end_s - word.start_s
    score = 1.0 if word.probability < 0.15 else 0.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def is_anomaly(words: Sequence[Word] | None) -> bool:
    """Whether a segment's first eight words (punctuation aside) look made up: a score of 3, or about one a word.
    A segment without words never does."""
    if not words:
        return False
    scored = [w for w in words if w.word not in PUNCTUATION][:8]
    score = sum(word_anomaly(w) for w in scored)
    return score >= 3 or score + 0.01 >= len(scored)


@attrs.frozen
class Cut:
    """What the rule does to one request: keep its first ``keep`` segments (0 with ``whole``: the request gives
    nothing, not even to the next prompt) and seek to ``seek`` (frames of the walked audio)."""

    keep: int
    seek: int
    whole: bool = False


def hallucination_cut(segments: Sequence[Segment], words: Sequence[Sequence[Word]], seek: int, size: int,
                      last_speech_s: float, threshold: float, content_frames: int, reach_s: float) -> Cut | None:
    """The cut for a request at ``seek`` over ``size`` frames (of ``content_frames``), whose kept ``segments``
    (times from the request's start, fitted to their words) hold ``words`` (the same times); ``last_speech_s``:
    where the speech before this request ended, in seconds of the walked audio; ``reach_s``: how far a request
    reaches after its seek whatever audio is left (``chunk_length``: faster-whisper's ``window_end_time``).
    None: nothing looks made up."""
    at = lambda seconds: seek / FRAMES_PER_S + seconds  # noqa: E731  (faster-whisper compares times in the file)
    timed = [i for i, group in enumerate(words) if group]
    if timed and is_anomaly(words[timed[0]]):
        gap = segments[timed[0]].start_s
        if gap > threshold:
            return Cut(0, seek + round(gap * FRAMES_PER_S), whole=True)
    last_end = last_speech_s
    for position, i in enumerate(timed):
        segment = segments[i]
        if is_anomaly(words[i]):
            following = timed[position + 1] if position + 1 < len(timed) else None
            next_start = at(words[following][0].start_s) if following is not None else at(size / FRAMES_PER_S)
            silence_before = (at(segment.start_s) - last_end > threshold or at(segment.start_s) < threshold
                              or segment.start_s < 2.0)
            silence_after = (next_start - at(segment.end_s) > threshold
                             or (following is not None and is_anomaly(words[following]))
                             or reach_s - segment.end_s < 2.0)
            if silence_before and silence_after:
                seek = round(max(at(1.0), at(segment.start_s)) * FRAMES_PER_S)
                if content_frames / FRAMES_PER_S - at(segment.end_s) < threshold:
                    seek = content_frames
                return Cut(i, seek)
        last_end = at(segment.end_s)
    return None
