"""The temperature fallback's ``best_of`` samples of one request, side by side in one decoder call a step.

When a segment's decode looks wrong, Whisper samples ``best_of`` responses of it at the next temperature and keeps
the likeliest (``decode.fallback``). Decoded one after another, each sample pays a whole decode; CTranslate2
samples them as rows of one batch for faster-whisper, and so does this: each sample is a row of the target's beam
rows (``capabilities.BeamRows``), every row's logits come from one call a step, and each row draws its tokens with
its own seed's noise at each response position (``decode.sampling``) from the logits that row alone would get.
Rows run target-only, as beams do: a drafter proposes greedy text, which a hot sample soon leaves, and one call
for all rows already costs about what one row's verification would.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from as2d_core.capabilities import ResponseScores
from as2d_core.contracts import Request, Target
from as2d_core.decode.beam import prepared_rows
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.result import DecodeResult, build_result, timestamp_ids
from as2d_core.decode.sampling import Sampling
from as2d_core.decode.scores import average_logprob, chosen_logprobs

METHOD = "best-of"


def run_samples_request(request: Request, target: Target, seeds: Sequence[int],
                        options: DecodeOptions | None = None) -> list[DecodeResult]:
    """One response per seed, sampled at ``request.temperature`` in one prepared session, all rows in one call a
    step; each result carries that shared clock. A row draws the noise a decode of the request with its seed
    alone draws, from rows scored as the session verifies (``beam_rows(as_verified=True)``: not an int8 graph for
    beams alone); the rows' batched arithmetic may still round the last bits of a logit otherwise (whisper-base:
    the same tokens on every sample checked), so every method decodes the fallback's samples here, and the
    fallback's results are the same for all."""
    if request.temperature <= 0:
        raise ValueError(f"samples are drawn above temperature 0, the request asks {request.temperature:g}")
    if not seeds:
        raise ValueError("run_samples_request needs at least one seed")
    options = options or DecodeOptions()
    events, counters = EventLog(), Counters()
    with prepared_rows(request, target, options, len(seeds), "rows side by side", as_verified=True) as (
            session, rows, arrival):
        prepare_s = time.perf_counter() - arrival
        events.add("prepare", arrival)
        scored = request.scores and isinstance(session, ResponseScores)
        clock_start = time.perf_counter()
        responses, logprobs = _sample(rows, [Sampling(request.temperature, seed) for seed in seeds],
                                      session.eos_token, session.max_new_tokens, events, counters, scored)
        clock_end = time.perf_counter()
        no_speech = session.no_speech_prob() if scored else None
        results = [build_result(attrs.evolve(request, seed=seed), METHOD, session, tokens,
                                session.decode_text(tokens), (clock_start, clock_end), prepare_s, counters, events,
                                [], avg_logprob=average_logprob(chosen, len(tokens), session) if scored else None,
                                no_speech_prob=no_speech, timestamp_ids=timestamp_ids(request, session))
                   for seed, tokens, chosen in zip(seeds, responses, logprobs)]
    return results


def _sample(rows, samplers: list[Sampling], eos: int, limit: int, events: EventLog,
            counters: Counters, scored: bool) -> tuple[list[list[int]], list[list[float]]]:
    """Each row's response (without its end token) and, if ``scored``, its chosen tokens' log-probabilities (the
    end's included; a log-softmax over the vocabulary a row a step, so not without need)."""
    width = len(samplers)
    responses: list[list[int]] = [[] for _ in range(width)]
    logprobs: list[list[float]] = [[] for _ in range(width)]
    held = [0] * width  # response tokens in each row's cache
    done = [False] * width
    logits = [rows.first_logits()[None]] * width
    while True:
        appended = []
        for i, sampler in enumerate(samplers):
            if not done[i]:
                token = sampler.choose(logits[i][:1], len(responses[i]))[0]
                if scored:
                    logprobs[i] += chosen_logprobs(logits[i][:1], [token])
                if token == eos:
                    done[i] = True
                else:
                    responses[i].append(token)
                    done[i] = len(responses[i]) >= limit
            appended.append([] if done[i] else [responses[i][-1]])
        if all(done):
            return responses, logprobs
        start = time.perf_counter()
        logits = rows.advance([(i, held[i], tokens) for i, tokens in enumerate(appended)])
        held = [h + len(tokens) for h, tokens in zip(held, appended)]
        events.add("step", start, tokens=sum(map(len, appended)), width=1)
        counters.target_only_steps += 1

