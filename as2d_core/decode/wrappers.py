"""Forwarding wrappers of the contracts: the one place that passes a source, a target or a session through.

A wrapper changes one thing about a part (drafting ahead, an injected fault, a cancel flag) and is
otherwise the part itself. Each member of the contract is forwarded by name, and so is each optional
capability the wrapped part declares (``Closable``, ``TaskList``, ``PrefixDrafting``, ...), and only
those: ``isinstance`` checks on a wrapper answer as they would on the part. Subclasses override the
contract's methods they change; an optional capability is always the wrapped part's own.
"""
from __future__ import annotations

from collections.abc import Sequence

from as2d_core.capabilities import (BeamScoring, Closable, FeatureList, ForcedStart, KnownVocabulary,
                                    LanguageDetector, PrefixDrafting, ResponseScores, ScoredSession, TaskList,
                                    TimestampVocabulary, WindowBatching, WordAligner)
from as2d_core.contracts import DraftJob, Request, Source, Target, TargetSession


class SourceWrapper:
    """A ``Source`` that forwards everything to ``inner``."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner
        self.name, self.vocabulary, self.languages, self.eos_token = (
            inner.name, inner.vocabulary, inner.languages, inner.eos_token)
        if isinstance(inner, TaskList):
            self.tasks = inner.tasks
        if isinstance(inner, TimestampVocabulary):
            self.timestamp_begin, self.time_precision_s = inner.timestamp_begin, inner.time_precision_s
        if isinstance(inner, PrefixDrafting):
            self.prefix_session = inner.prefix_session
        if isinstance(inner, Closable):
            self.close = inner.close

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.inner.decode_text(tokens)

    def prepare(self, request: Request, language: str, threads: int) -> DraftJob:
        return self.inner.prepare(request, language, threads)


class TargetWrapper:
    """A ``Target`` that forwards everything to ``inner``."""

    def __init__(self, inner: Target) -> None:
        self.inner = inner
        self.name, self.vocabulary = inner.name, inner.vocabulary
        if isinstance(inner, FeatureList):
            self.features = inner.features
        if isinstance(inner, WordAligner):
            self.prepare_words, self.align_words = inner.prepare_words, inner.align_words
        if isinstance(inner, LanguageDetector):
            self.languages, self.language_probabilities = inner.languages, inner.language_probabilities
        if isinstance(inner, WindowBatching):
            self.window_group = inner.window_group

    @property
    def device_in_use(self) -> list[str]:  # a backend may know it only once the model has run
        return self.inner.device_in_use

    def prepare(self, request: Request, threads: int) -> TargetSession:
        return self.inner.prepare(request, threads)


class SessionWrapper:
    """A ``TargetSession`` that forwards everything to ``inner``."""

    def __init__(self, inner: TargetSession) -> None:
        self.inner = inner
        self.language, self.eos_token, self.max_new_tokens = inner.language, inner.eos_token, inner.max_new_tokens
        if isinstance(inner, KnownVocabulary):
            self.vocab_size = inner.vocab_size
        if isinstance(inner, TimestampVocabulary):
            self.timestamp_begin, self.time_precision_s = inner.timestamp_begin, inner.time_precision_s
        if isinstance(inner, ScoredSession):
            self.first_token_confidence = inner.first_token_confidence
            self.verify_with_confidence = inner.verify_with_confidence
        if isinstance(inner, ResponseScores):
            self.token_logprobs, self.no_speech_prob = inner.token_logprobs, inner.no_speech_prob
        if isinstance(inner, BeamScoring):
            self.beam_rows = inner.beam_rows
        if isinstance(inner, ForcedStart):
            self.forced_tokens = inner.forced_tokens

    @property
    def cache_length(self) -> int:
        return self.inner.cache_length

    def first_token(self) -> int:
        return self.inner.first_token()

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        return self.inner.verify(root, candidates)

    def truncate(self, cache_length: int) -> None:
        self.inner.truncate(cache_length)

    def use_threads(self, threads: int) -> None:
        self.inner.use_threads(threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.inner.decode_text(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self.inner.encode_text(text)

    def close(self) -> None:
        self.inner.close()
