"""The contracts every drafter, target and bridge implements.

The engine only talks to these protocols, so a plugin never has to import
anything from the engine, and the engine never imports a model runtime.

Vocabulary of the paper (Appendix C):
- a *request* fixes the audio view and the instruction for a whole response;
- a *source* (drafter) reads only that request and its own history, and yields
  draft pieces; the core converts them to the target vocabulary (a bridge) and
  publishes immutable batches;
- a *target* is prepared before the request (audio encoded, prompt prefilled)
  and then verifies a known root plus up to ``b`` candidates per call.

What a part may offer beyond these (timestamps, scores, beams, several windows in one call, ...) is in
``as2d_core.capabilities``.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future
from typing import Protocol, TypeVar, runtime_checkable

import attrs
import numpy as np

SAMPLE_RATE = 16_000
TASKS = ("asr", "translate", "qa")
# the marks Whisper's word timestamps join to the word after them and to the word before them (faster-whisper's
# prepend_punctuations and append_punctuations, with their defaults)
WORD_PUNCTUATION = ("\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
TIMESTAMPS = ("none", "segment")  # segment: the target decodes timestamp tokens (``as2d_core.decode.timestamps``)


T = TypeVar("T")


_NICENESS_PER_THREAD = sys.platform.startswith("linux") or sys.platform == "android"


def thread_niceness() -> int | None:
    """The calling thread's niceness; None where niceness is not per thread (``workers.priority`` sets it)."""
    if not _NICENESS_PER_THREAD:
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class _SharedComputations:
    """Computations by key that concurrent callers share: a later caller waits for the first one's result, unless
    the first runs at a lower priority than its own (a drafter's niced thread, which on a busy host may wait
    seconds for a core): it then computes its own rather than wait on it (the README's first call beside two busy
    processes waited about 0.7 s for a guessed-language drafter's log-mel; BENCHMARKS.md section 47). ``keep``: a result
    stays for later callers; else only while it is being computed."""

    def __init__(self, keep: bool) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._entries: dict[Hashable, Future] = {}

    def shared(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, or the result of the first call for the same ``key``: running now, or kept."""
        mine = thread_niceness()
        with self._lock:
            future = self._entries.get(key)
            owner = future is None
            if owner:
                future = self._entries[key] = Future()
                future.niceness = mine
        if not owner:
            if not future.done() and None not in (mine, future.niceness) and future.niceness > mine:
                return compute()
            return future.result()
        try:
            future.set_result(compute())
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            if not self._keep or future.exception() is not None:
                with self._lock:
                    del self._entries[key]
        return future.result()

    def computing(self) -> bool:
        """Whether a computation is under way (for tests of the sharing)."""
        with self._lock:
            return any(not future.done() for future in self._entries.values())


class FeatureCache(_SharedComputations):
    """Features that several models compute from one request's audio, computed once while they overlap.

    The target and a drafter started with the request may both want the same features at arrival
    (a Whisper target and a Whisper drafter: the log-mel); the later caller waits for the first one's
    result instead of repeating it, unless the first runs at a lower priority (``_SharedComputations``).
    Nothing is kept after the computation: each decode of a request
    pays for its own features (a bench compares methods on one request), and the requests of a long
    file hold none. Results are shared, so ``compute`` should return a read-only value.
    """

    def __init__(self) -> None:
        super().__init__(keep=False)

    def __reduce__(self):  # a copied or pickled request shares nothing in flight with the original
        return (FeatureCache, ())


def _readonly_audio(audio: np.ndarray) -> np.ndarray:
    view = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
    view = view.copy()
    view.setflags(write=False)
    return view


class Recording:
    """The whole recording long-form requests are cut from, for a model whose features depend on all of it:
    Whisper's log-mel is normalised by the recording's loudest frame, and faster-whisper computes it once per
    file and slices each 30 s request out of it. What a model computes from it is kept for the next request."""

    def __init__(self, audio: np.ndarray) -> None:
        self.audio = _readonly_audio(audio)
        self._computed = _SharedComputations(keep=True)

    def shared(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()`` once per ``key`` for the whole recording (the first caller computes, the others wait,
        unless it runs at a lower priority than theirs: ``_SharedComputations``)."""
        return self._computed.shared(key, compute)

    def __reduce__(self):  # a drafter process gets the samples and computes its own
        return (Recording, (self.audio,))


def _token_ids(value) -> tuple[int, ...]:
    return tuple(int(t) for t in value)


@attrs.frozen
class TokenPrompt:
    """Prompt tokens taken as they are: faster-whisper's ``initial_prompt`` given as ids, and the tokens of the
    segments before a request, which Whisper feeds back as decoded (text encoded again may split otherwise).

    Ids mean something only in the vocabulary they were made in, so they carry its name (``Target.vocabulary``);
    a model of another vocabulary, such as a drafter's, reads ``text`` instead (None: it leaves the prompt out).
    """

    vocabulary: str
    tokens: tuple[int, ...] = attrs.field(converter=_token_ids)
    text: str | None = None


@attrs.frozen
class ScoreRules:
    """How a request edits the target's scores before each choice: faster-whisper's options of these names, as
    CTranslate2 applies them. Each reads only the response before the position it scores, so a verification
    applies them per position as one step at a time would, and the tokens stay the target's own in that mode."""

    suppress_blank: bool = True  # the first response token is no blank and no end
    suppress_tokens: tuple[int, ...] = attrs.field(default=(-1,), converter=_token_ids)  # -1: the model's set
    max_initial_timestamp: float = attrs.field(default=1.0, validator=attrs.validators.ge(0.0))  # seconds
    # a token already in the response (the forced prefix included) scores less: divided when positive,
    # multiplied when negative (CTRL's penalty)
    repetition_penalty: float = attrs.field(default=1.0, validator=attrs.validators.gt(0.0))
    no_repeat_ngram_size: int = attrs.field(default=0, validator=attrs.validators.ge(0))  # 0: off


@attrs.frozen
class Request:
    """The fixed input z = (audio view, instruction) of one response (Appendix A.1).

    The audio is copied into a read-only array so neither the producer nor the
    target can extend or edit it while the response is decoded.
    """

    request_id: str
    audio: np.ndarray = attrs.field(converter=_readonly_audio, eq=False, repr=False)
    language: str | None = None
    task: str = attrs.field(default="asr", validator=attrs.validators.in_(TASKS))
    instruction: str | None = None
    sample_rate: int = SAMPLE_RATE
    timestamps: str = attrs.field(default="none", validator=attrs.validators.in_(TIMESTAMPS))
    # Whisper's previous-text prompt (before its start-of-transcript token): the user's ``prompt``, refused
    # when too long, then ``previous_text`` (earlier windows' text, with Whisper's timestamp markup such as
    # ``<|2.40|>`` where they had timestamps, or their tokens as decoded), of which a target keeps what fits;
    # ``hotwords`` as faster-whisper places them, before both. A drafter gets the same request. Either prompt may
    # be given as tokens (``TokenPrompt``), taken as they are by a model of their vocabulary.
    prompt: str | TokenPrompt | None = None
    previous_text: str | TokenPrompt | None = None
    hotwords: str | None = None
    # text the target's response is made to start with (faster-whisper's ``prefix``): forced after the start of
    # transcript (and its first timestamp); the result's tokens begin with it (``capabilities.ForcedStart``), the
    # response verified after it; a drafter may ignore it
    prefix: str | None = None
    rules: ScoreRules = ScoreRules()
    # the target keeps what it needs to time the response's words after decoding (``WordAligner``), and joins
    # these marks to the word after them and to the word before them
    word_timestamps: bool = False
    punctuations: tuple[str, str] = attrs.field(default=WORD_PUNCTUATION, converter=tuple)
    # seconds of the audio the words are aligned over (None: its own length); faster-whisper's batched pipeline
    # aligns a chunk's words over its length in whole seconds
    align_s: float | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.gt(0.0)))
    # the target session keeps its tokens' log-probabilities and the no-speech probability (``ResponseScores``)
    scores: bool = False
    # the decoding mode: 0 is greedy; above it the target samples at this temperature with Gumbel noise drawn from
    # (seed, response position) alone (``as2d_core.decode.sampling``), so verification stays exact; a drafter
    # drafts greedily whatever the mode (its tokens are only proposals)
    temperature: float = attrs.field(default=0.0, validator=attrs.validators.ge(0.0))
    seed: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    # at most this many response tokens (faster-whisper's ``max_new_tokens``); None: what the model's context holds
    max_new_tokens: int | None = attrs.field(default=None, validator=attrs.validators.optional(attrs.validators.ge(1)))
    # what the request's target and drafter compute from its audio once for both; not a field of the request
    # (not compared, not in ``fields``), so a copy made with ``attrs.evolve`` or in a drafter process starts empty
    # a long-form request: the recording it is cut from and its first sample there (``audio`` is
    # ``recording.audio[offset : offset + audio.size]``), for features computed over the whole recording
    recording: Recording | None = attrs.field(default=None, eq=False, repr=False)
    offset: int = 0
    feature_cache: FeatureCache = attrs.field(factory=FeatureCache, init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(f"request audio must be {SAMPLE_RATE} Hz, got {self.sample_rate} Hz")
        if self.audio.size == 0:
            raise ValueError("request audio is empty")

    @property
    def duration_s(self) -> float:
        return self.audio.size / self.sample_rate

    @property
    def features(self) -> frozenset[str]:
        """What the request asks of its target beyond audio and task (a target lists those it has in ``features``)."""
        asked = {"timestamps": self.timestamps != "none", "prompt": bool(self.prompt or self.previous_text),
                 "hotwords": bool(self.hotwords), "word_timestamps": self.word_timestamps,
                 "sampling": self.temperature > 0, "prefix": bool(self.prefix),
                 "score_rules": self.rules != ScoreRules(),
                 "punctuations": self.word_timestamps and self.punctuations != WORD_PUNCTUATION}
        return frozenset(name for name, on in asked.items() if on)

    def fields(self) -> dict:
        """Every field by name (``Request(**fields)`` makes it again, as a drafter process does)."""
        return {field.name: getattr(self, field.name) for field in attrs.fields(Request) if field.init}


@attrs.frozen
class DraftPiece:
    """What a drafter yields: tokens in its own vocabulary.

    ``boundary`` marks the end of an atomic unit (a finished audio chunk): the
    producer publishes everything it holds right then. Autoregressive drafters
    yield one token per piece and leave batching to the producer.
    """

    tokens: tuple[int, ...]
    confidences: tuple[float, ...] | None = None
    boundary: bool = False
    span_s: tuple[float, float] | None = None


@attrs.frozen
class PublishedBatch:
    """An immutable run of candidate tokens, already in the target vocabulary (C.1)."""

    request_id: str
    source_id: str
    producer_id: str
    offset: int  # index of tokens[0] in the source record
    tokens: tuple[int, ...]
    published_at: float  # time.perf_counter() at publication
    confidences: tuple[float, ...] | None = None
    span_s: tuple[float, float] | None = None
    final: bool = False  # the producer has nothing more for this record


@runtime_checkable
class TargetSession(Protocol):
    """One request's target state, prepared before the request arrives.

    The cache holds the prompt and ``cache_length`` response tokens. The known
    root is the last committed token, which is not in the cache yet.
    """

    language: str
    eos_token: int
    max_new_tokens: int
    cache_length: int
    # A session may also say its vocabulary's size (``capabilities.KnownVocabulary``): drafted ids outside it
    # end the drafts.

    def first_token(self) -> int:
        """The target's greedy first response token, from the prefilled prompt."""

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        """Append root and candidates to the cache in one call.

        Returns the greedy token after each appended position
        (``len(candidates) + 1`` tokens); greedy must equal one-at-a-time decoding.
        """

    def truncate(self, cache_length: int) -> None:
        """Cut the self-attention cache back to ``cache_length`` response tokens."""

    def use_threads(self, threads: int) -> None:
        """Run later calls on ``threads`` CPU threads (the drafter has finished)."""

    def decode_text(self, tokens: Sequence[int]) -> str:
        """Text of response tokens (special tokens dropped)."""

    def encode_text(self, text: str) -> list[int]:
        """Target token ids of plain text (used by text bridges)."""

    def close(self) -> None:
        """Release request-scoped buffers."""


@runtime_checkable
class Target(Protocol):
    name: str
    vocabulary: str  # tokenizer identity; a source with the same one needs no bridge
    device_in_use: list[str]  # what really runs the model (e.g. ONNX Runtime providers), for profiles and reports

    def prepare(self, request: Request, threads: int) -> TargetSession:
        """Encode audio, bind audio KV and prefill the prompt (not on the decode clock)."""


@runtime_checkable
class DraftJob(Protocol):
    """A drafter's work for one request, prepared before the request.

    ``ended_with_eos`` becomes True when ``pieces`` ran out because the drafter produced its end
    token (or its audio ran out): the bridge then publishes the target's end token as a candidate.
    """

    ended_with_eos: bool

    def pieces(self) -> Iterator[DraftPiece]:
        """Generate drafts from the audio and the drafter's own history only."""

    def close(self) -> None:
        """Release resources; called by the producer thread when it ends."""


@runtime_checkable
class Source(Protocol):
    name: str
    vocabulary: str
    languages: frozenset[str] | None  # None: any language
    eos_token: int

    def decode_text(self, tokens: Sequence[int]) -> str:
        """Text of drafter tokens (used by text bridges)."""

    def prepare(self, request: Request, language: str, threads: int) -> DraftJob:
        """Encode audio for the drafter (background preparation)."""


@runtime_checkable
class Bridge(Protocol):
    """Carries drafter tokens into the target vocabulary, never publishing a token that may change."""

    def push(
        self, tokens: Sequence[int], confidences: Sequence[float] | None
    ) -> tuple[list[int], list[float] | None]:
        """Add drafter tokens; return the target tokens that are now final (and their confidences if known)."""

    def finish(self, ended_with_eos: bool) -> tuple[list[int], list[float] | None]:
        """Flush what is held back; add the target's end token if the drafter ended."""


class BridgeFactory(Protocol):
    """What a registered bridge is: it makes one request's bridge from the pair and the target's prepared session.

    The factory for a source and a target is chosen once, when they load (``as2d_core.setup.catalog.resolve_bridge``),
    and handed to the engine with them.
    """

    def __call__(self, source: Source, target: Target, session: TargetSession) -> Bridge:
        """A fresh bridge for one request."""


def serves_language(source: Source, language: str) -> bool:
    return source.languages is None or language in source.languages
