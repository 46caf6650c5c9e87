"""Target session and draft job over any incremental LM with all-position logits and cache cut-back.

Qwen-family models on MNN's LLM engine and on torch expose the same three
primitives (prefill a prompt, append tokens and get logits for each of them,
cut the KV cache back to a length), so the as2d contracts are written once here
over a small ``LMState`` and each backend only implements that state.
Importing this module imports no runtime.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Callable, Protocol

import numpy as np

from as2d_core.contracts import DraftPiece, Request


class LMState(Protocol):
    """One request's KV state on a backend."""

    length: int  # positions held (prompt + response)

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        """Run ``tokens`` after the cache; float logits ``[len(tokens), vocab]``."""

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions."""

    def use_threads(self, threads: int) -> None: ...

    def close(self) -> None: ...


class LMTargetSession:
    """A prepared target: prompt (with audio) prefilled; verify appends root + candidates in one call."""

    def __init__(self, state: LMState, prompt_logits: np.ndarray, *, language: str, eos_token: int,
                 max_new_tokens: int, decode: Callable[[Sequence[int]], str], encode: Callable[[str], list[int]],
                 suppress: Sequence[int] = ()):
        self._state = state
        self._prompt_length = state.length
        self._suppress = np.asarray(list(suppress), dtype=np.int64)
        # Only the last prompt row matters: widening all of them (prompt x vocab) to float64 first costs a copy
        # of the whole prompt's logits, about a gigabyte for a 30 s Omni prompt.
        self._first = int(np.argmax(self._mask(np.asarray(prompt_logits[-1], np.float64))))
        self._decode, self._encode = decode, encode
        self.language = language
        self.eos_token = int(eos_token)
        self.max_new_tokens = int(max_new_tokens)

    def _mask(self, logits: np.ndarray) -> np.ndarray:
        if self._suppress.size:
            logits = np.array(logits, dtype=np.float64)
            logits[..., self._suppress] = -np.inf
        return logits

    @property
    def cache_length(self) -> int:
        return self._state.length - self._prompt_length

    def first_token(self) -> int:
        return self._first

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        logits = self._state.append([int(root), *(int(c) for c in candidates)])
        return [int(t) for t in np.argmax(self._mask(logits), axis=-1)]

    def truncate(self, cache_length: int) -> None:
        if not 0 <= cache_length <= self.cache_length:
            raise ValueError(f"cannot truncate a cache of {self.cache_length} response tokens to {cache_length}")
        self._state.truncate(self._prompt_length + cache_length)

    def use_threads(self, threads: int) -> None:
        self._state.use_threads(threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self._decode(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self._encode(text)

    def close(self) -> None:
        self._state.close()


class LMDraftJob:
    """Greedy drafting from the drafter's own prefilled prompt and history only (never the target's)."""

    def __init__(self, state: LMState, prompt_logits: np.ndarray, *, eos_token: int, max_new_tokens: int,
                 suppress: Sequence[int] = ()):
        self._state = state
        # A copy of the last row, not a view: a view would keep every prompt position's logits alive for the job.
        self._logits = np.array(prompt_logits[-1:])
        self._suppress = np.asarray(list(suppress), dtype=np.int64)
        self.eos_token = int(eos_token)
        self.max_new_tokens = int(max_new_tokens)
        self.ended_with_eos = False

    def pieces(self) -> Iterator[DraftPiece]:
        logits = self._logits
        for _ in range(self.max_new_tokens):
            row = np.array(logits[-1], dtype=np.float64)
            if self._suppress.size:
                row[self._suppress] = -np.inf
            token = int(np.argmax(row))
            if token == self.eos_token:
                self.ended_with_eos = True
                return
            confidence = 1.0 / float(np.exp(row - row[token]).sum())
            yield DraftPiece(tokens=(token,), confidences=(confidence,))
            logits = self._state.append([token])

    def close(self) -> None:
        self._state.close()


class LMTarget:
    """``Target.prepare`` over a model whose ``_start(request, threads)`` prefills and returns ``(state, logits)``.

    Both Qwen plugins build their sessions the same way; only the prompt differs, so that is all they write.
    """

    eos_token: int
    max_new_tokens: int

    def prepare(self, request: Request, threads: int) -> LMTargetSession:
        state, logits = self._start(request, threads)
        return LMTargetSession(state, logits, language=request.language or "auto", eos_token=self.eos_token,
                               max_new_tokens=self.max_new_tokens, decode=self.decode_text, encode=self.encode_text)


class LMSource:
    """``Source.prepare`` over the same ``_start``: the drafter reads the request's audio and instruction only."""

    languages = None
    eos_token: int
    max_new_tokens: int

    def prepare(self, request: Request, language: str, threads: int) -> LMDraftJob:
        state, logits = self._start(request, threads)
        return LMDraftJob(state, logits, eos_token=self.eos_token, max_new_tokens=self.max_new_tokens)
