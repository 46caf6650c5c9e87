"""Word timestamps: a decode result's words, from its target after decoding (``--word-timestamps``).

A target that offers them implements :class:`~as2d_core.capabilities.WordAligner`: one pass over the
committed tokens, so they cost every method the same and as2d's words are target-only's (its tokens
are). Whatever drafted the tokens plays no part. The pipeline asks for them per window and shifts them
by the window's start.
"""
from __future__ import annotations

import time

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


def add_words(target: Target, request: Request, result, threads: int):
    """``result`` (a ``DecodeResult`` of ``request``) with its words and their cost (``words_s``) when the
    request asks for them; as it is otherwise."""
    if not request.word_timestamps:
        return result
    started = time.perf_counter()
    result.words = check_word_aligner(target).align_words(request, result.language, result.tokens, threads)
    result.words_s = time.perf_counter() - started
    return result
