"""The optional capabilities of a target, a session, a source or a job: what the engine uses where a part has it.

A plugin implements the required contracts (``as2d_core.contracts``) and any of these; the engine checks for
each with ``isinstance`` (every protocol here is runtime-checkable) and does without it otherwise: decoding
several windows in one call, timestamps, scores, beams, word timing, language detection, cancelling a job.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import numpy as np

from as2d_core.contracts import Request, Source, Target, TargetSession


@runtime_checkable
class WindowGroup(Protocol):
    """Rows for several windows of one target, whose verifications can share one call (``WindowBatching``)."""

    size: int

    def prepare(self, request: Request, threads: int) -> TargetSession:
        """The request prepared as ``Target.prepare`` does, in a row of the group until its session is closed."""

    def verify_rows(self, rows: Sequence[tuple[TargetSession, int, Sequence[int]]]) -> list[list[int]]:
        """``session.verify(root, candidates)`` of every row, in one call: each row gets the tokens it gets alone."""


@runtime_checkable
class WindowBatching(Protocol):
    """A target that verifies several windows in one call (a decoder step reads all its weights however few
    tokens it appends, so windows side by side share that cost)."""

    def window_group(self, size: int, threads: int) -> WindowGroup | None:
        """A group of up to ``size`` rows, or None where this target (its backend, its model files) cannot."""


@runtime_checkable
class CancellableJob(Protocol):
    """Optional for a draft job: stop drafting soon, from another thread, while ``pieces`` runs.

    The engine calls it when the target is done (or failed), so a job that waits or loops between
    runtime calls ends at once; a runtime call already under way still finishes first.
    """

    def cancel(self) -> None:
        """Make ``pieces`` end as soon as it can; never raises."""


@runtime_checkable
class OneJobAtATime(Protocol):
    """A source that drafts one job at a time (``workers.process_source``: its child serves one): the pipeline
    then neither drafts the next window ahead nor drafts windows side by side."""

    one_job_at_a_time: bool


def drafts_one_job_at_a_time(source: Source | None) -> bool:
    return isinstance(source, OneJobAtATime) and source.one_job_at_a_time


@runtime_checkable
class Closable(Protocol):
    """Optional for a source (or a chunked source's per-request transcriber): release what it holds (a drafter
    process, native threads) when it is dropped; one without ``close`` holds nothing that needs it."""

    def close(self) -> None:
        """Release resources; never called while a job of it runs."""


@runtime_checkable
class TaskList(Protocol):
    """Optional for a source: the tasks it drafts (``serves_task``); a source without the list drafts any."""

    tasks: frozenset[str] | None  # None: any, as without the list


@runtime_checkable
class FeatureList(Protocol):
    """Optional for a target: what a request may ask of it beyond audio and task (``Request.features``:
    timestamps, prompt, hotwords, word_timestamps, sampling); a target without the list offers none of them."""

    features: frozenset[str]


@runtime_checkable
class KnownVocabulary(Protocol):
    """Optional for a target session: the size of its vocabulary, so the engine can end a drafter that
    publishes ids the target cannot even embed, instead of letting a verification fail."""

    vocab_size: int


@runtime_checkable
class TimestampVocabulary(Protocol):
    """Optional for a source or a target session: Whisper-style timestamp tokens, ``timestamp_begin + i`` meaning
    ``i * time_precision_s`` seconds into the request (a target's segments, and bridges carrying a drafter's)."""

    timestamp_begin: int
    time_precision_s: float


@runtime_checkable
class TextEncoder(Protocol):
    """Optional for a target: its tokenizer on plain text, for a caller that makes a prompt's ids itself
    (faster-whisper's batched pipeline encodes its ``initial_prompt`` as it is, where a text prompt gets a space)."""

    def encode_text(self, text: str) -> list[int]:
        """The token ids of ``text``, with no special tokens."""


@runtime_checkable
class LanguageDetector(Protocol):
    """Optional for a target: how likely each language is in a request's audio, by the detection its
    ``prepare`` runs when the request names none (which takes the likeliest)."""

    languages: Sequence[str]  # the codes it tells apart, in the model's order

    def language_probabilities(self, request: Request, threads: int) -> dict[str, float]:
        """Language code -> probability, likeliest first."""


@attrs.frozen
class Word:
    """One word of a response: seconds from the request's start (``shifted`` moves them) and the mean
    probability of its tokens; ``word`` keeps its leading space, as Whisper's words do."""

    word: str
    start_s: float
    end_s: float
    probability: float

    def shifted(self, offset_s: float) -> "Word":
        return attrs.evolve(self, start_s=self.start_s + offset_s, end_s=self.end_s + offset_s)

    def as_dict(self) -> dict:
        return {"word": self.word, "start_s": self.start_s, "end_s": self.end_s, "probability": self.probability}


@attrs.frozen
class TimedWords:
    """A response's words and its segments' times as the words fit them: as Whisper's word timestamps do, a
    segment's start and end move to its first and last word's, unless that word runs far past the segment's
    timestamp (then the word is cut back instead). Times in seconds from the request's start."""

    words: list[Word]
    segments: list[tuple[float, float]]  # (start_s, end_s) of each of the response's segments with text, in order


@runtime_checkable
class WordAligner(Protocol):
    """Optional for a target: word timestamps for a committed response, in one pass after decoding.

    They depend only on the request, the tokens and where the speech before them ended, so every method that
    commits the same tokens gets the same words at the same cost. A request that wants them says so
    (``Request.word_timestamps``), so its session can keep what the pass needs (the audio's encoding); the
    target lists ``"word_timestamps"`` in its ``features``.
    """

    def prepare_words(self, threads: int) -> None:
        """Load what aligning needs (once), or raise saying what to install."""

    def align_words(self, request: Request, language: str, tokens: Sequence[int], threads: int,
                    last_speech_s: float = 0.0) -> TimedWords:
        """The words of ``tokens`` (response tokens, timestamp tokens included) in order, and their segments'
        times; ``last_speech_s``: where the speech before them ended, in seconds of the audio the request is cut
        from (its ``offset``), as Whisper's long form carries it from request to request."""


@runtime_checkable
class ScoredSession(TargetSession, Protocol):
    """A drafter session that also says how sure it is (SpecASR's confidence rule needs it)."""

    def first_token_confidence(self) -> float:
        """Probability of ``first_token()``."""

    def verify_with_confidence(self, root: int, candidates: Sequence[int]) -> tuple[list[int], list[float]]:
        """``verify`` plus the probability of each returned greedy token."""


@runtime_checkable
class ResponseScores(Protocol):
    """Optional for a target session: how sure the target was of its own greedy tokens, as Whisper's decoders
    report it (faster-whisper's ``avg_logprob`` and ``no_speech_prob`` come from these).

    A session keeps them only for a request that asks (``Request.scores``), so decoding without them costs
    nothing; for another request both raise. The values are the target's, so every method that commits the same
    tokens gets the same scores (up to the rounding of a batched verification).
    """

    def token_logprobs(self) -> list[float]:
        """The log-probability of the first token, then of the greedy token after each response position in the
        cache (``cache_length + 1`` values), each under the distribution the greedy choice was made from (with the
        target's suppressions and timestamp rules); kept in step with ``truncate``."""

    def no_speech_prob(self) -> float:
        """The probability of the no-speech token at the start-of-transcript position (raw logits, as Whisper)."""


@runtime_checkable
class ForcedStart(Protocol):
    """Optional for a target session: the tokens its response is made to start with (``Request.prefix``),
    prefilled after the prompt. A result's tokens begin with them, and its scores count them as tokens that cost
    nothing, as CTranslate2 returns a forced prefix (``decode.result.build_result``)."""

    forced_tokens: list[int]


def forced_tokens(session) -> list[int]:
    """The session's forced start (``ForcedStart``), or none."""
    return list(session.forced_tokens) if isinstance(session, ForcedStart) else []


@runtime_checkable
class BeamRows(Protocol):
    """Hypotheses of one prepared request side by side, each in a row with its own cache (beam search).

    A row holds the prompt and some response tokens. Hypotheses fork and die between steps, so ``advance``
    rebuilds every row from a prefix of a parent row, then appends tokens to all rows in as few decoder calls
    as the target can (``as2d_core.decode.beam``).
    """

    width: int

    def first_logits(self) -> np.ndarray:
        """``[vocab]``: the first response token's logits after the prompt, suppressions and rules applied."""

    def advance(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        """``rows[i] == (parent, kept, appended)``: row ``i`` becomes the first ``kept`` response tokens of row
        ``parent`` (as it was before the call), then ``appended``. Returns each row's logits
        ``[len(appended), vocab]`` after each appended token, with the target's suppressions and rules for that
        row's response up to the token (exactly what the same row would get alone, one token at a time)."""

    def close(self) -> None:
        """Release the rows' caches."""


@runtime_checkable
class BeamScoring(Protocol):
    """Optional for a target session: beam search over its prepared request."""

    def beam_rows(self, width: int, as_verified: bool = False) -> BeamRows:
        """``width`` rows holding the prompt alone (the session's own cache is left as it is); ``as_verified``:
        scored with the arithmetic of the session's own verification, never a faster one for beams alone (sampled
        rows must draw what a decode alone draws)."""


@runtime_checkable
class BeamWave(Protocol):
    """The beam rows of several prepared sessions (a wave of windows), each step of all of them in one call, as
    faster-whisper's batched pipeline searches its batch: a decoder call reads all its weights however few rows
    it appends. Made by ``BeamWaves.beam_wave``; ``decode.together.BeamsTogether`` gathers the steps."""

    size: int  # windows side by side at most

    def rows(self, session: TargetSession, width: int, gather: "Callable[[object], list[np.ndarray]]") -> BeamRows:
        """``session``'s ``width`` rows in the wave. Their ``advance`` stages its step and hands it to ``gather``,
        which returns, once one call served every member of the wave, what ``step`` gave for it."""

    def step(self, asks: Sequence[tuple[TargetSession, object]]) -> list[list[np.ndarray]]:
        """One call for every member's staged step ``(session, staged)``: each member's raw logits per row,
        what its rows would get alone (the rows' contract)."""


@runtime_checkable
class BeamWaves(Protocol):
    """Optional for a target: beam search of several windows side by side (``BeamWave``)."""

    def beam_wave(self, size: int, width: int, threads: int) -> BeamWave | None:
        """A wave of up to ``size`` windows with ``width`` rows each, or None where this target (its backend, its
        model files) cannot. A row scores as it would in a wave of one, on the same arithmetic (as a
        ``WindowGroup``'s rows)."""


@runtime_checkable
class PrefixDrafting(Protocol):
    """Optional for a source: drafting from a given prefix, as serial speculative decoding needs.

    The session speaks the drafter's vocabulary with the target's session API, so the serial
    baselines can bring it in step with the target's committed prefix before each round. A
    session that is also a :class:`ScoredSession` gives confidences (for SpecASR's stop rule).
    """

    def prefix_session(self, request: Request, language: str, threads: int) -> TargetSession:
        """A prepared, prefix-conditioned drafter session for one request."""


def serves_task(source: Source, task: str) -> bool:
    """Whether ``source`` drafts ``task``; a source may list its ``tasks`` (one that lists none drafts any)."""
    return not isinstance(source, TaskList) or source.tasks is None or task in source.tasks


def unsupported_features(target: Target, request: Request) -> list[str]:
    """What ``request`` asks that ``target`` does not list in its optional ``features`` (none listed: none offered)."""
    offered = target.features if isinstance(target, FeatureList) else ()
    return sorted(request.features - frozenset(offered))
