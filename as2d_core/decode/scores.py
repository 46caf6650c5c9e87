"""What Whisper's decoders report of a response besides its tokens, computed as faster-whisper computes them.

``avg_logprob``: faster-whisper recovers it from CTranslate2's greedy score with length penalty 1, which sums
the log-probability of every sampled token, the end token included, under the distribution the token was
chosen from (suppressions and timestamp rules applied before the log-softmax), and divides by the tokens
without the end token; faster-whisper multiplies that length back and divides by ``len(tokens) + 1``. An empty
response thus has no average (CTranslate2 divides by zero; faster-whisper's value is NaN). ``no_speech_prob``:
the no-speech token's probability at the start-of-transcript position. A target session that keeps them
(``capabilities.ResponseScores``) does so only for a request that asks (``Request.scores``).
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from as2d_core.capabilities import ResponseScores, forced_tokens
from as2d_core.contracts import TargetSession


def response_scores(session: TargetSession, tokens: Sequence[int]) -> tuple[float | None, float | None]:
    """``(avg_logprob, no_speech_prob)`` of the committed ``tokens`` (the end token not among them), read from a
    session that keeps them; ``(None, None)`` from one that does not."""
    if not isinstance(session, ResponseScores):
        return None, None
    return average_logprob(session.token_logprobs(), len(tokens), session), session.no_speech_prob()


def average_logprob(logprobs: Sequence[float], count: int, session: TargetSession) -> float:
    """faster-whisper's ``avg_logprob`` of a response of ``count`` tokens from ``logprobs``, the chosen tokens'
    log-probabilities in order (the end token's after them, if it was chosen)."""
    ended = count < session.max_new_tokens  # a decode stops short of the limit only at the end token
    logprobs = logprobs[: count + ended]
    count += len(forced_tokens(session))  # a forced start counts as tokens that cost nothing, as CTranslate2's
    return sum(logprobs) / (count + 1) if count else math.nan


def chosen_logprobs(rows: np.ndarray, tokens: Sequence[int]) -> list[float]:
    """Log-softmax of each row's chosen token (``rows``: ``[K, vocab]``, the scores the tokens were chosen from;
    untempered, as openai-whisper scores sampled tokens too)."""
    rows = rows.astype(np.float64)
    top = rows.max(axis=-1, keepdims=True)
    norm = top[:, 0] + np.log(np.exp(rows - top).sum(axis=-1))
    return [float(rows[j, t] - norm[j]) for j, t in enumerate(tokens)]


def is_silent(avg_logprob: float, no_speech_prob: float, no_speech_threshold: float | None,
              log_prob_threshold: float | None) -> bool:
    """faster-whisper's check after a window's decode, in its order: a no-speech probability over its threshold
    makes the window silence (skipped, its text not fed to the next window), unless the average log-probability
    is over its own threshold. Without temperature fallback (as2d decodes greedily) this is all it does."""
    if no_speech_threshold is None:
        return False
    silent = no_speech_prob > no_speech_threshold
    if log_prob_threshold is not None and avg_logprob > log_prob_threshold:
        silent = False  # a confident decode is speech, whatever the no-speech token says
    return silent


def compression_ratio(text: str) -> float:
    """faster-whisper's ``get_compression_ratio``: UTF-8 bytes over their zlib-compressed bytes."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0
