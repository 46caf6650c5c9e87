"""A small deterministic decoder with a real KV cache, for engine tests.

It implements the Target/TargetSession contracts exactly as a model plugin
does (batched verification, cache truncation), so the engine is tested on the
same calls it makes on Whisper. Float64 keeps batched and one-at-a-time
greedy decisions identical.
"""
from __future__ import annotations

import copy
import hashlib
import threading
import time

import numpy as np

from as2d_core.contracts import DraftPiece
from as2d_core.decode.sampling import Sampling
from as2d_core.decode.timestamps import TimestampRules
from as2d_core.decode.wrappers import SessionWrapper


class TinyLM:
    """``timestamps``: that many timestamp tokens after ``vocab`` (and ``<|notimestamps|>`` before them), decoded
    under Whisper's timestamp rules (``as2d_core.decode.timestamps``) when a request asks for timestamps."""

    name = "tiny-lm"
    vocabulary = "tiny"
    device_in_use = ["numpy:CPU"]

    def __init__(self, vocab: int = 32, dim: int = 16, layers: int = 2, seed: int = 0, max_new_tokens: int = 48,
                 timestamps: int = 0):
        self.eos_token = 1
        self.rules = None
        self.features = frozenset({"sampling", "prompt"})
        if timestamps:  # Whisper's layout: text, the end token, <|notimestamps|>, the timestamps
            self.eos_token = vocab - 1
            self.rules = TimestampRules(begin=vocab + 1, eot=self.eos_token, no_timestamps=vocab,
                                        max_initial=timestamps // 4)
            self.features = frozenset({"timestamps", "sampling", "prompt"})
            vocab += 1 + timestamps
        rng = np.random.default_rng(seed)
        self.vocab, self.dim, self.layers = vocab, dim, layers
        self.embed = rng.normal(0, 1.0, (vocab, dim))
        self.pos = rng.normal(0, 0.3, (512, dim))
        self.wq, self.wk, self.wv, self.wo = (rng.normal(0, dim**-0.5, (layers, dim, dim)) for _ in range(4))
        self.w1 = rng.normal(0, dim**-0.5, (layers, dim, 2 * dim))
        self.w2 = rng.normal(0, (2 * dim) ** -0.5, (layers, 2 * dim, dim))
        self.out = rng.normal(0, 1.0, (dim, vocab))
        self.max_new_tokens = max_new_tokens
        self.calls = 0

    def prepare(self, request, threads):
        # the prompt: from the audio and any previous text (Whisper's prompt conditions the response likewise)
        text = f"{request.prompt}|{request.previous_text}".encode() if request.prompt or request.previous_text else b""
        digest = hashlib.sha256(np.asarray(request.audio).tobytes() + text).digest()
        prompt = [2 + b % ((self.eos_token if self.rules else self.vocab) - 2) for b in digest[:4]]
        return TinySession(self, prompt, self.rules if request.timestamps != "none" else None,
                           Sampling(request.temperature, request.seed), request.scores)


class TinySession:
    language = "en"

    time_precision_s = 0.02

    def __init__(self, model: TinyLM, prompt: list[int], rules: TimestampRules | None = None,
                 sampling: Sampling = Sampling(), scores: bool = False):
        self.m = model
        self.sampling = sampling
        self.eos_token = model.eos_token
        self.vocab_size = model.vocab
        self.max_new_tokens = model.max_new_tokens
        self.rules = rules
        if model.rules is not None:
            self.timestamp_begin = model.rules.begin
        self.response: list[int] = []  # the response tokens in the cache, for the timestamp rules
        self.k = np.zeros((model.layers, 0, model.dim))
        self.v = np.zeros((model.layers, 0, model.dim))
        self.prompt_length = len(prompt)
        self.cache_length = -len(prompt)  # counts response tokens; the prompt is below zero
        first = self._logits(prompt)[-1:]
        if rules is not None:
            rules.apply(first[0], [])
        self._first = sampling.choose(first, 0)[0]
        # with scores (``ResponseScores``): the chosen tokens' log-probabilities, first token first
        self._logprobs = _logprobs(first, [self._first]) if scores else None
        self._no_speech = float(1 / (1 + np.exp(-first[0, 0]))) if scores else None
        self._first_row = first[0].copy()  # what beam search starts from (``beam_rows``)
        self.threads = None

    def _logits(self, tokens):
        m = self.m
        start = self.k.shape[1]
        x = m.embed[tokens] + m.pos[start : start + len(tokens)]
        new_k, new_v = [], []
        for layer in range(m.layers):
            h = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
            q, k, v = h @ m.wq[layer], h @ m.wk[layer], h @ m.wv[layer]
            keys = np.concatenate([self.k[layer], k])
            values = np.concatenate([self.v[layer], v])
            scores = q @ keys.T / np.sqrt(m.dim)
            mask = np.arange(keys.shape[0])[None, :] > (start + np.arange(len(tokens)))[:, None]
            scores = np.where(mask, -np.inf, scores)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            x = x + (weights @ values) @ m.wo[layer]
            h = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
            x = x + np.tanh(h @ m.w1[layer]) @ m.w2[layer]
            new_k.append(k)
            new_v.append(v)
        self.k = np.concatenate([self.k, np.stack(new_k)], axis=1)
        self.v = np.concatenate([self.v, np.stack(new_v)], axis=1)
        self.cache_length += len(tokens)
        logits = x @ m.out
        logits[:, m.eos_token] -= 2.0  # keep responses from ending too early
        if m.rules is not None:
            logits[:, m.rules.no_timestamps + 1 :] += 1.5  # timestamps often enough to exercise the rules
        return logits

    def first_token(self):
        return self._first

    def verify(self, root, candidates):
        self.m.calls += 1
        appended = [root, *candidates]
        logits = self._logits(appended)
        if self.rules is not None:  # each position under the rules for the response up to it
            self.rules.apply_rows(logits, self.response, appended)
        position = len(self.response) + 1
        self.response += appended
        chosen = self.sampling.choose(logits, position)
        if self._logprobs is not None:
            self._logprobs += _logprobs(logits, chosen)
        return chosen

    def token_logprobs(self):
        if self._logprobs is None:
            raise ValueError("no scores kept")
        return list(self._logprobs)

    def no_speech_prob(self):
        if self._no_speech is None:
            raise ValueError("no scores kept")
        return self._no_speech

    def beam_rows(self, width, as_verified=False):  # one arithmetic: rows score as verify does
        return TinyBeamRows(self, width)

    def truncate(self, cache_length):
        keep = self.prompt_length + cache_length
        self.k, self.v = self.k[:, :keep], self.v[:, :keep]
        self.cache_length = cache_length
        del self.response[cache_length:]
        if self._logprobs is not None:
            del self._logprobs[cache_length + 1:]

    def use_threads(self, threads):
        self.threads = threads

    def decode_text(self, tokens):
        return " ".join(f"t{t}" for t in tokens)

    def encode_text(self, text):
        return [int(w[1:]) for w in text.split()]

    def close(self):
        pass


class TinyBeamRows:
    """Hypotheses of one TinySession for beam search (``capabilities.BeamRows``): each row a copy of the session
    (its cache arrays are replaced on every append, never edited, so copies share nothing that changes)."""

    def __init__(self, session: TinySession, width: int):
        self.width = width
        self._first = session._first_row
        self._rows = [copy.copy(session) for _ in range(width)]
        for row in self._rows:
            row.response = []  # its own list before truncate edits it
            row.truncate(0)

    def first_logits(self):
        return self._first.copy()

    def advance(self, rows):
        parents = [copy.copy(self._rows[parent]) for parent, _, _ in rows]
        out = []
        for i, (row, (_, kept, appended)) in enumerate(zip(parents, rows)):
            row.response = row.response[:kept]  # its own list (a copy's is its parent's) before truncate edits it
            row.truncate(kept)
            logits = row._logits(list(appended)) if appended else np.empty((0, row.m.vocab))
            if row.rules is not None:
                row.rules.apply_rows(logits, row.response, list(appended))
            row.response = row.response + list(appended)
            self._rows[i] = row
            out.append(logits)
        self._rows[0].m.calls += 1  # all rows in one call, as a batched target makes it
        return out

    def close(self):
        self._rows = []


def _logprobs(rows, tokens):
    top = rows.max(-1, keepdims=True)
    norm = top[:, 0] + np.log(np.exp(rows - top).sum(-1))
    return [float(rows[j, t] - norm[j]) for j, t in enumerate(tokens)]


class SlowTarget:
    """TinyLM whose calls take ``delay`` seconds, so the producer publishes ahead of it
    (or a drafter in a child process reports its fault before the target is done)."""

    name, vocabulary, device_in_use = TinyLM.name, TinyLM.vocabulary, TinyLM.device_in_use

    def __init__(self, delay: float = 0.003, model: TinyLM | None = None):
        self.delay = delay
        self.model = model or TinyLM()

    def prepare(self, request, threads):
        return _SlowSession(self.model.prepare(request, threads), self.delay)


class _SlowSession(SessionWrapper):
    """A TinySession whose verify sleeps first (a wrapper: patching the session's own verify would
    tie it to itself in a reference cycle, which the leak tests must not see)."""

    def __init__(self, session: TinySession, delay: float):
        super().__init__(session)
        self._delay = delay

    def verify(self, root, candidates):
        time.sleep(self._delay)
        return self.inner.verify(root, candidates)


class ScriptedSource:
    """Publishes a given token list with given per-token delays; can crash or stall on purpose."""

    vocabulary = "tiny"
    languages = frozenset({"en"})
    eos_token = 1

    def __init__(self, tokens, delays=None, crash_after=None, stall_after=None, name="scripted", boundaries=()):
        self.name = name
        self.tokens = list(tokens)
        self.delays = list(delays or [0.0] * len(self.tokens))
        self.crash_after = crash_after
        self.stall_after = stall_after
        self.boundaries = set(boundaries)

    def decode_text(self, tokens):
        return " ".join(f"t{t}" for t in tokens)

    def prepare(self, request, language, threads):
        return ScriptedJob(self)


class ScriptedJob:
    ended_with_eos = False

    def __init__(self, source: ScriptedSource):
        self.s = source
        self.release = threading.Event()

    def pieces(self):
        for i, token in enumerate(self.s.tokens):
            if self.s.crash_after is not None and i == self.s.crash_after:
                raise RuntimeError("drafter crashed on purpose")
            if self.s.stall_after is not None and i == self.s.stall_after:
                self.release.wait(30)  # a stalled drafter; the target must not wait for it
            if self.s.delays[i]:
                time.sleep(self.s.delays[i])
            yield DraftPiece(tokens=(token,), confidences=(0.5,), boundary=i in self.s.boundaries)

    def close(self):
        self.release.set()


def edited_draft(reference, edits, other=lambda token: [token, token]) -> tuple[list[int], int]:
    """A draft made from ``reference`` by arbitrary edits ``(op, token)``: keep, sub, ins, del, and any other op
    adds ``other(token)`` (junk, as does a keep past the end); also how far into the reference the edits reached."""
    drafted, i = [], 0
    for op, token in edits:
        if op == "keep" and i < len(reference):
            drafted.append(reference[i]); i += 1
        elif op == "sub":
            drafted.append(token); i += 1
        elif op == "ins":
            drafted.append(token)
        elif op == "del":
            i += 1
        else:  # junk, also a "keep" past the reference's end
            drafted.extend(other(token))
    return drafted, i
