"""Beam search with faster-whisper's semantics (CTranslate2's beam search), on any target whose sessions score
several hypotheses side by side (``capabilities.BeamScoring``).

Each step takes the ``2 * beam_size`` best continuations of the live hypotheses by cumulative log-probability
(the target's suppressions and timestamp rules applied per hypothesis, then a log-softmax). Of the first
``beam_size``, one that ends in the end token is finished and its place goes to the next continuation that does
not end; at the last allowed step every one of them is finished. The search stops when
``round(beam_size * patience)`` hypotheses are finished (with ``length_penalty`` 0: once a step's best
continuation ended), and the finished hypothesis with the best ``cum_logprob / len ** length_penalty`` wins (``len``
without the end token). faster-whisper derives ``avg_logprob`` from that score.

The search reads only the target's scores, so it is the target's own. ``beam_search`` takes proposals, which
only change how many positions a call scores (a step whose hypotheses all follow drafted tokens needs no call),
never which hypotheses win; on 2 cores they did not pay (``docs/architecture.md``, beam search), so
``run_beam_request`` runs beams target-only, all live hypotheses in one decoder call per step.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence

import attrs
import numpy as np

from as2d_core.capabilities import (BeamRows, BeamScoring, KnownVocabulary, ResponseScores, forced_tokens,
                                    unsupported_features)
from as2d_core.contracts import BridgeFactory, Request, Source, Target, TargetSession
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.result import DecodeResult, build_result, timestamp_ids


def _at_least_two(instance, attribute, value):
    if not isinstance(value, int) or value < 2:
        raise ValueError(f"beam_size must be an integer of at least 2, got {value!r} (beam_size 1 is greedy decoding: "
                         "run_request)")


def _positive(instance, attribute, value):
    if not value > 0:
        raise ValueError(f"{attribute.name} must be above 0, got {value!r}")


@attrs.frozen
class BeamOptions:
    """faster-whisper's beam options, with its defaults. ``max_length``: response tokens at most (None: what
    the target's context leaves after the prompt, as greedy decoding here; CTranslate2 stops at half the
    context, 224 tokens for Whisper)."""

    beam_size: int = attrs.field(default=5, validator=_at_least_two)
    patience: float = attrs.field(default=1.0, validator=_positive)
    length_penalty: float = attrs.field(default=1.0, converter=float)
    max_length: int | None = attrs.field(default=None, validator=attrs.validators.optional(_positive))

    def __attrs_post_init__(self) -> None:
        if self.finished_needed < 1:
            raise ValueError(f"patience {self.patience} leaves no hypothesis to finish with beam_size "
                             f"{self.beam_size} (round(beam_size * patience) must be at least 1)")

    @property
    def finished_needed(self) -> int:
        """How many finished hypotheses end the search (CTranslate2 rounds half away from zero)."""
        return math.floor(self.beam_size * self.patience + 0.5)


@attrs.frozen
class Hypothesis:
    """A finished hypothesis: its tokens (no end token), summed log-probability (the end token's included)
    and the score it is ranked by."""

    tokens: tuple[int, ...]
    cum_logprob: float
    score: float
    forced: int = 0  # tokens of a forced start before ``tokens``, counted in its length as CTranslate2 counts them

    def avg_logprob(self, length_penalty: float) -> float:
        """faster-whisper's: the cumulative log-probability recovered from the score, over the tokens and the end."""
        length = len(self.tokens) + self.forced
        with np.errstate(invalid="ignore"):
            cum = np.float64(self.score) * np.float64(length) ** length_penalty
        return float(cum / (length + 1))


def log_softmax(rows: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 (a masked entry stays -inf), in a new array.

    Computed in place in two arrays, not in five: a 5-beam step's rows are 2 MB in float64, and fresh memory
    of that size costs a page fault every 4 kB (1.4 ms against 2.2 ms a step here, the same bits)."""
    rows = np.array(rows, dtype=np.float64)
    top = rows.max(axis=-1, keepdims=True)
    shifted = rows - top
    total = np.exp(shifted, out=shifted).sum(axis=-1, keepdims=True)
    rows -= top + np.log(total)
    return rows


def _ranked(score: float, length: int, length_penalty: float) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        ranked = float(np.float64(score) / np.float64(length) ** length_penalty)
    return -math.inf if math.isnan(ranked) else ranked  # an empty response that cost nothing: 0 / 0


# top_candidates first reads every this-many-th score: a bound that spares partitioning a step's whole array
SAMPLE_STRIDE = 64


def top_candidates(scores: np.ndarray, count: int) -> np.ndarray:
    """Flat indices of the ``count`` best ``scores``, best first; ties go to the lower index.

    The ``count``-th best of a strided sample is at most the whole array's, so the scores at or above it hold
    every candidate: only they are partitioned (a 5-beam step of whisper-base: under a thousand of 259,325 scores,
    0.1 ms against 2.0 ms for the whole array), and the result is the same."""
    if count >= scores.size:
        return np.argsort(-scores, kind="stable")
    sample = scores[::SAMPLE_STRIDE]
    if sample.size > count:
        bound = np.partition(sample, sample.size - count)[sample.size - count]
        pool = np.flatnonzero(~(scores < bound))  # a NaN, which a partition ranks above all, stays in as before
    else:
        pool = np.arange(scores.size)
    kept = scores[pool]
    threshold = np.partition(kept, kept.size - count)[kept.size - count]
    at_least = pool[kept >= threshold]  # ascending, so a stable sort keeps ties in index order
    return at_least[np.argsort(-scores[at_least], kind="stable")[:count]]


# Drafted tokens to follow one hypothesis (its tokens, without the end token); only proposals, checked by the target.
Propose = Callable[[tuple[int, ...]], Sequence[int]]


def beam_search(rows: BeamRows, eos_token: int, max_steps: int, beam: BeamOptions, events: EventLog,
                counters: Counters, propose: Propose | None = None, budget: int = 0,
                forced: int = 0) -> Hypothesis:
    """The best finished hypothesis of one response (see the module's docstring for the rules).

    With ``propose``, each row also appends up to ``budget`` drafted tokens after its hypothesis' newest token,
    so the call scores the positions after them too. A step whose kept hypotheses all follow a drafted token of
    distinct parents then needs no call: each row's next logits are already there, computed on a cache that holds
    exactly that hypothesis. The search reads the same logits either way, so proposals never change its result.

    ``forced``: the response follows a forced start of this many tokens, which count in a hypothesis' length, and
    CTranslate2 keeps the end token at the first step only as the best continuation: any other becomes token 0 at
    a score of -1e10, a hypothesis that never wins.
    """
    size, wanted = beam.beam_size, 2 * beam.beam_size
    early_exit = beam.length_penalty == 0
    live: list[tuple[int, ...]] = [()]  # one live hypothesis at first: the empty response
    ahead = [[rows.first_logits()]]  # each live hypothesis' logits, then after each drafted token in its row
    drafted: list[list[int]] = [[]]  # the drafted tokens in each live hypothesis' row, after its tokens
    cum = np.zeros(1)
    finished: list[Hypothesis] = []
    for step in range(max_steps):
        flat = log_softmax([logits[0] for logits in ahead])  # float64 straight from the rows: one copy
        vocab = flat.shape[1]
        flat += cum[:, None]
        flat = flat.reshape(-1)
        best = top_candidates(flat, wanted)
        parents, tokens, scores = best // vocab, best % vocab, flat[best]
        if forced and step == 0:
            ended = np.flatnonzero(tokens == eos_token)
            ended = ended[ended > 0]
            tokens[ended], scores[ended] = 0, -1e10
        last = step + 1 == max_steps
        keep, spare, top_finished = [], size, False
        for k in range(size):
            chosen = k
            if tokens[k] == eos_token or last:
                top_finished |= k == 0
                ended = live[parents[k]] + (() if tokens[k] == eos_token else (int(tokens[k]),))
                finished.append(Hypothesis(ended, float(scores[k]),
                                           _ranked(scores[k], forced + len(ended), beam.length_penalty), forced))
                for j in range(spare, len(best)):  # the next continuation that does not end takes its place
                    if tokens[j] != eos_token:
                        chosen, spare = j, j + 1
                        break
            keep.append(chosen)
        if last or (top_finished if early_exit else len(finished) >= beam.finished_needed):
            break
        kept = [(int(parents[j]), int(tokens[j])) for j in keep]
        live = [live[parent] + (token,) for parent, token in kept]
        cum = scores[keep]
        on_path = [drafted[parent][:1] == [token] for parent, token in kept]
        if all(on_path) and len({parent for parent, _ in kept}) == size:  # every row's next logits are there
            rows.advance([(parent, step + len(drafted[parent]), []) for parent, _ in kept])  # drafts kept
            ahead = [ahead[parent][1:] for parent, _ in kept]
            drafted = [drafted[parent][1:] for parent, _ in kept]
            counters.accepted += size
            continue
        room = min(budget, max_steps - step - 2)  # a row never holds the response's last allowed token
        drafted = [list(propose(hypothesis))[:room] if propose is not None and room > 0 else []
                   for hypothesis in live]
        start = time.perf_counter()
        ahead = [list(logits) for logits in rows.advance(
            [(parent, step, [token, *more]) for (parent, token), more in zip(kept, drafted)])]
        width = 1 + max(len(more) for more in drafted)
        events.add("verify" if width > 1 else "step", start, tokens=1, width=width)
        if width > 1:
            counters.verify_calls += 1
            counters.widths.append(width)
            counters.proposed += sum(len(more) for more in drafted)
        else:
            counters.target_only_steps += 1
    # the best score first; among equal scores, the first finished (a stable sort)
    return max(finished, key=lambda h: h.score) if finished else Hypothesis((), -math.inf, -math.inf)


class NoRows(ValueError):
    """The target's sessions have no rows side by side (``capabilities.BeamScoring``)."""


@contextlib.contextmanager
def prepared_rows(request: Request, target: Target, options: DecodeOptions, width: int, use: str,
                  as_verified: bool = False) -> Iterator[tuple[TargetSession, BeamRows, float]]:
    """The request prepared on ``target`` (its features checked first) with ``width`` rows from its prompt, both
    closed on the way out: ``(session, rows, arrival)``; ``use`` names what needs the rows, where there are none."""
    missing = unsupported_features(target, request)
    if missing:
        raise ValueError(f"target {target.name} does not offer {' or '.join(missing)}")
    arrival = time.perf_counter()
    session = target.prepare(request, options.target_threads)
    rows = None
    try:
        if not isinstance(session, BeamScoring):
            raise NoRows(f"target {target.name} offers no {use} (its sessions lack beam_rows)")
        # a session written before ``as_verified`` still serves beams, which never ask for it
        rows = session.beam_rows(width, as_verified) if as_verified else session.beam_rows(width)
        yield session, rows, arrival
    finally:
        if rows is not None:
            rows.close()
        session.close()


def run_beam_request(request: Request, target: Target, beam: BeamOptions, options: DecodeOptions | None = None,
                     source: Source | None = None, bridge: BridgeFactory | None = None) -> DecodeResult:
    """One response by beam search on the target alone, as ``run_request`` returns it (method ``"beam"``).

    ``source`` and ``bridge`` are taken for the engine's call shape and not used: beams run target-only
    (the module's docstring says why); the result's note says so when a source was given. With
    ``request.scores``, ``avg_logprob`` and ``no_speech_prob`` are faster-whisper's for the beam result.
    """
    if not isinstance(beam, BeamOptions):
        raise TypeError(f"beam must be BeamOptions, got {type(beam).__name__}")
    if request.temperature != 0:
        raise ValueError(f"beam search decodes at temperature 0, the request asks {request.temperature:g}")
    options = options or DecodeOptions()
    events, counters = EventLog(), Counters()
    with prepared_rows(request, target, options, beam.beam_size, "beam search") as (session, rows, arrival):
        vocab = session.vocab_size if isinstance(session, KnownVocabulary) else None
        if vocab is not None and 2 * beam.beam_size > vocab:
            raise ValueError(f"beam_size {beam.beam_size} needs {2 * beam.beam_size} candidates a step; "
                             f"{target.name} has {vocab} tokens")
        steps = session.max_new_tokens if beam.max_length is None else min(beam.max_length, session.max_new_tokens)
        prepare_s = time.perf_counter() - arrival
        events.add("prepare", arrival)
        clock_start = time.perf_counter()
        best = beam_search(rows, session.eos_token, steps, beam, events, counters,
                           forced=len(forced_tokens(session)))
        clock_end = time.perf_counter()
        tokens = list(best.tokens)
        text = session.decode_text(tokens)
        scores = (best.avg_logprob(beam.length_penalty), session.no_speech_prob()) \
            if request.scores and isinstance(session, ResponseScores) else (None, None)
    note = f"beam search runs target-only; source {source.name} not used" if source is not None else None
    return build_result(request, "beam", session, tokens, text, (clock_start, clock_end), prepare_s, counters,
                        events, [], avg_logprob=scores[0], no_speech_prob=scores[1], note=note,
                        timestamp_ids=timestamp_ids(request, session))
