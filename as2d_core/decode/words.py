"""Word timestamps: a decode result's words, from its target after decoding (``--word-timestamps``).

A target that offers them implements :class:`~as2d_core.capabilities.WordAligner`: one pass over the
committed tokens, so they cost every method the same and as2d's words are target-only's (its tokens
are). Whatever drafted the tokens plays no part. The pipeline asks for them per window and shifts them
by the window's start.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs

from as2d_core.capabilities import WordAligner
from as2d_core.contracts import Request, Target


def check_word_aligner(target: Target) -> WordAligner:
    """``target`` as a word aligner, or a ValueError that says it has none."""
    if not isinstance(target, WordAligner):
        raise ValueError(f"word timestamps need a target that aligns words (as2d_core.capabilities.WordAligner, "
                         f"the Whisper targets do); target {target.name} does not")
    return target


def prepare_words(target: Target, threads: int) -> None:
    """Load what aligning needs now (a clear error if the target cannot), so no window pays for it."""
    check_word_aligner(target).prepare_words(threads)


def add_words(target: Target, request: Request, result, threads: int, last_speech_s: float = 0.0,
              tokens: Sequence[int] | None = None):
    """``result`` (a ``DecodeResult`` of ``request``) with its words, its segments' times as they fit them, and
    what timing them cost (``words_s``) when the request asks for them; as it is otherwise. ``tokens``: the
    response's tokens to time (by default all; Whisper's long form times only the segments it keeps, which
    ``result.segments`` then are)."""
    if not request.word_timestamps:
        return result
    started = time.perf_counter()
    tokens = result.tokens if tokens is None else tokens
    timed = check_word_aligner(target).align_words(request, result.language, tokens, threads, last_speech_s)
    if len(timed.segments) != len(result.segments):
        raise ValueError(f"{target.name} timed {len(timed.segments)} segments of a response with "
                         f"{len(result.segments)}")
    result.segments = [attrs.evolve(segment, start_s=start, end_s=end)
                       for segment, (start, end) in zip(result.segments, timed.segments)]
    result.words = timed.words
    result.words_s = time.perf_counter() - started
    return result


def speech_end_s(result) -> float | None:
    """Where a timed response's speech ends (seconds from its request's start): its last word's end, else its
    last segment's (faster-whisper's ``get_end``); None without segments."""
    if result.words:
        return result.words[-1].end_s
    return result.segments[-1].end_s if result.segments else None


def words_by_segment(segments: Sequence[Any], words: Sequence[Any]) -> list[list[Any]]:
    """Each segment's words: the next words until they hold as many non-space characters as its text (a
    window's words spell its text, and its segments split it)."""
    out, at = [], 0
    for segment in segments:
        need, mine = len("".join(segment.text.split())), []
        while at < len(words) and need > 0:
            need -= len("".join(words[at].word.split()))
            mine.append(words[at])
            at += 1
        out.append(mine)
    if out and at < len(words):
        out[-1].extend(words[at:])
    return out
