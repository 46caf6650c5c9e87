"""Whisper's temperature fallback: decode a segment again, hotter, when the result looks wrong.

faster-whisper (like openai-whisper) decodes each 30 s segment at the first temperature (0: greedy, or beam
search), and if the text repeats itself (compression ratio over 2.4) or the model was unsure (average
log-probability under -1) it decodes again at the next temperature, sampling ``best_of`` hypotheses and
keeping the likeliest. A segment the model marks as silence (no-speech probability over 0.6 while unsure)
ends the fallback at once. Every attempt here is one exact decode call: greedy and beam search are the
target's own, and sampling draws seeded noise per position (``decode.sampling``), so the attempts, the
decisions made on them and the result are the same for every method that decodes them, speculative or not.
"""
from __future__ import annotations

from collections.abc import Callable

import attrs

from as2d_core.contracts import Request
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.sampling import derive_seed
from as2d_core.decode.scores import compression_ratio, is_silent


@attrs.define
class Attempt:
    """One decode of a segment at one temperature (the likeliest of ``best_of`` samples above 0)."""

    result: DecodeResult
    temperature: float
    compression_ratio: float

    @property
    def avg_logprob(self) -> float:
        return self.result.avg_logprob if self.result.avg_logprob is not None else float("-inf")

    @property
    def no_speech_prob(self) -> float:
        return self.result.no_speech_prob if self.result.no_speech_prob is not None else 0.0


def needs_fallback(attempt: Attempt, mode: DecodeOptions) -> bool:
    """faster-whisper's rule: too repetitive or too unsure, unless it is silence (then no hotter try helps)."""
    too_repetitive = (mode.compression_ratio_threshold is not None
                      and attempt.compression_ratio > mode.compression_ratio_threshold)
    scored = attempt.result.avg_logprob is not None  # a target that keeps no scores is judged by its text alone
    unsure = scored and mode.log_prob_threshold is not None and attempt.avg_logprob < mode.log_prob_threshold
    silence = (mode.no_speech_threshold is not None and attempt.no_speech_prob > mode.no_speech_threshold
               and unsure)
    return (too_repetitive or unsure) and not silence


def is_silence(attempt: Attempt, mode: DecodeOptions) -> bool:
    """faster-whisper's no-speech skip after the fallback: the segment is dropped and the seek moves past it."""
    return is_silent(attempt.avg_logprob, attempt.no_speech_prob, mode.no_speech_threshold, mode.log_prob_threshold)


# the results of one request sampled once per seed (the request's own seed aside), in the seeds' order
DecodeSamples = Callable[[Request, list[int]], list[DecodeResult]]


def decode_with_fallback(request: Request, decode: Callable[[Request], DecodeResult], mode: DecodeOptions,
                         key: object = 0, decode_samples: DecodeSamples | None = None
                         ) -> tuple[Attempt, list[Attempt]]:
    """The kept attempt and every attempt made, in order. ``decode`` decodes one request in its mode
    (``request.temperature``; beam search at 0 when ``mode.beam_size`` > 1 is the caller's choice); ``mode`` holds
    faster-whisper's options (``DecodeOptions``: temperatures, best_of, thresholds, seed); ``key`` names the segment,
    so each segment's samples draw their own noise from ``mode.seed``. ``decode_samples`` decodes a temperature's
    samples together (``decode.best_of``); without it each is one ``decode``."""
    attempts: list[Attempt] = []
    for temperature in mode.temperature:
        hot = attrs.evolve(request, temperature=temperature, seed=0, scores=True)
        if temperature == 0:
            results = [decode(hot)]
        else:
            seeds = [derive_seed(mode.seed, key, temperature, sample) for sample in range(mode.best_of)]
            results = decode_samples(hot, seeds) if decode_samples is not None else \
                [decode(attrs.evolve(hot, seed=seed)) for seed in seeds]
        tries = [Attempt(result, temperature, compression_ratio(result.text.strip())) for result in results]
        attempt = max(tries, key=_ranked(mode.length_penalty))  # the first of equals, as a stable sort keeps it
        attempts.append(attempt)
        if not needs_fallback(attempt, mode):
            return attempt, attempts
    below = [a for a in attempts if mode.compression_ratio_threshold is None
             or a.compression_ratio <= mode.compression_ratio_threshold]
    best = max(below or attempts, key=lambda a: a.avg_logprob)
    # every temperature failed: faster-whisper keeps the likeliest result with the last temperature, which its
    # segments report and the prompt reset reads (``prompt_reset_on_temperature``)
    return attrs.evolve(best, temperature=attempts[-1].temperature), attempts


def _ranked(length_penalty: float) -> Callable[[Attempt], float]:
    """How CTranslate2 ranks sampled hypotheses: cumulative log-probability over length ** length_penalty."""

    def score(attempt: Attempt) -> float:
        length = len(attempt.result.tokens) + 1  # the end token is scored too
        return attempt.avg_logprob * length / length ** length_penalty

    return score
