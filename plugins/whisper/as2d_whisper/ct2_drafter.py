"""whisper-tiny.en drafting on CTranslate2 (int8 weights, one thread): the cheapest drafter step we have.

CTranslate2's ``Whisper.generate`` runs a whole greedy decode in C++ and has no
single-step call and no per-token callback (4.x); a prompt prefix is not
prefilled but re-decoded token by token, so resuming costs as much as starting
over. A job therefore decodes each chunk of the request's audio in one call (the
first chunk optionally in two: a short call whose tokens reach the target early,
then the whole decode, whose tokens past the first call's are new). The
suppression lists are the ONNX drafter's (from ``model.json``), and the decoder
prompt is built as the target builds its own (``WhisperVocabulary.decoder_prompt``),
so both drafters decode the same way. In timestamp mode the prompt lacks
``<|notimestamps|>`` and CTranslate2 applies Whisper's timestamp rules itself; a
later chunk's timestamps are moved by the chunk's start, so they count from the
request's start as the target's do.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from as2d_core.contracts import DraftPiece, Request, ScoreRules
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.paths import models_dir as default_models_dir
from as2d_core.workers.priority import run_at_lower_priority, thread_niceness

from .convert.ct2_folder import CT2_FILES
from .features import (HOP_LENGTH, N_FRAMES, SAMPLE_RATE, pad_or_trim, quiet_cuts, request_encoder_input,
                       request_log_mel)
from .vocabulary import LAST_TIMESTAMP, WhisperVocabulary, read_model_folder

NAME = "whisper-tiny.en-ct2"
_DEFAULTS = DecodeOptions()
INSTALL_HINT = f"run `as2d models install {NAME}`"


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError as exc:
        raise ImportError(f"the CTranslate2 drafter needs ctranslate2: run `pip install 'as2d-whisper[ct2]'` ({exc})") from exc
    return ctranslate2


class Ct2DraftJob:
    """Greedy decoding of one request on CTranslate2, chunk by chunk, from its audio and its own history only.

    ``chunks``: the encoder inputs, each with its cap on drafted tokens and where it starts in the
    request's audio (in timestamps). The first is encoded by ``prepare`` (``encoded``); the others
    are encoded here when their turn comes, on the producer's thread, so the first chunk's tokens
    are published before the rest is encoded.
    """

    def __init__(self, model, encoded, chunks: Sequence[tuple[np.ndarray, int, int]], source: "Ct2WhisperSource",
                 prompt: Sequence[int], rules: ScoreRules = ScoreRules()):
        self._model = model
        self._rules = rules  # the request's penalties steer the drafts toward the target's text
        self._features = encoded
        self._chunks = list(chunks)
        self._source = source
        self.prompt = list(prompt)
        self.max_new_tokens = sum(cap for _, cap, _ in self._chunks)
        self.ended_with_eos = False
        self._cancelled = threading.Event()

    def decode(self, max_new_tokens: int, features=None, first_chunk: bool = True) -> list[int]:
        """Greedy tokens after the prompt (on the first chunk by default), at most ``max_new_tokens``, without the end token.

        CTranslate2 4.x stops a Whisper decode after ``min(max_length // 2, max_length - prompt + 1)``
        tokens (its source, and measured with 4.8.5), hence the length asked. Whisper caps the first
        timestamp at 1 s into the request's audio; a later chunk starts mid-request, so not there.
        """
        length = max(2 * max_new_tokens, max_new_tokens + len(self.prompt) - 1)
        result = self._model.generate(
            self._features if features is None else features, [self.prompt], beam_size=1, max_length=length,
            suppress_blank=True, suppress_tokens=self._source.suppress_tokens,
            repetition_penalty=self._rules.repetition_penalty, no_repeat_ngram_size=self._rules.no_repeat_ngram_size,
            max_initial_timestamp_index=self._source.timestamp_rules.max_initial if first_chunk else LAST_TIMESTAMP)
        return [int(t) for t in result[0].sequences_ids[0]]

    def pieces(self) -> Iterator[DraftPiece]:
        """Per chunk, its whole decode; on the first chunk, an early piece of ``first_call_tokens`` before it.

        Each piece is a boundary (publish now): its tokens were all ready at once. Every
        chunk's text starts a new transcription, so its tokens follow the previous chunk's
        as they are. CTranslate2 returns no end token; a decode shorter than its cap ended on it.
        """
        first = self._source.first_call_tokens
        for index, (mel, cap, offset) in enumerate(self._chunks):
            if self._cancelled.is_set():
                return
            features = self._features if index == 0 else self._source.encode(self._model, mel)
            drafted: list[int] = []
            if index == 0 and 0 < first < cap:
                drafted = self.decode(first, features)
                if drafted:
                    yield DraftPiece(tokens=tuple(drafted), boundary=True)
                if self._cancelled.is_set():
                    return
            tokens = self.decode(cap, features, first_chunk=index == 0)
            # One deterministic decode extends the other; should they ever differ, the target still verifies.
            if tokens[len(drafted):]:
                yield DraftPiece(tokens=tuple(self._source.shift_timestamps(tokens[len(drafted):], offset)),
                                 boundary=True)
            self.ended_with_eos = len(tokens) < cap

    def cancel(self) -> None:
        """No further CTranslate2 call (the one under way cannot be interrupted, so it finishes)."""
        self._cancelled.set()

    def close(self) -> None:
        self._features = None
        self._chunks = []


class Ct2WhisperSource(WhisperVocabulary):
    """whisper-tiny.en as an English drafter on CTranslate2 (``compute_type`` int8 by default).

    One loaded model per thread count and niceness: CTranslate2 fixes its threads at
    load and decodes on a worker thread it starts then, which keeps the niceness of the
    thread that loaded it; a producer at a lower priority (``DecodeOptions.drafter_nice``
    or ``guess_nice``) must get a model whose worker runs at that priority too. Models are built on first
    use, or at load time for ``preload_threads`` at each of ``preload_nice`` (the default
    drafter niceness on a named language and on a guessed one). ``first_call_tokens``:
    the length of the early first call (0: one call, the whole decode).

    ``audio_margin_s``: None encodes the 30 s window, as Whisper was trained; a number
    encodes only the audio plus that much silence (CTranslate2 takes shorter features),
    so the encoder's cost follows the clip's length. Without enough margin tiny.en
    loops on short clips (of the 30 English clips under 10 s, four looped with 1 s, two
    with 3 s, one with 4 or 6 s; BENCHMARKS.md section 6), so the drafted length is also
    capped at ``16 + 8 tokens/s`` of audio.

    ``chunk_s`` (needs a margin): audio longer than this is drafted in balanced chunks cut
    at their quietest moment (``quiet_cuts``), each encoded with ``chunk_margin_s`` of silence
    and decoded on its own. The encoder's attention grows with the square of its input
    (1 thread: 0.37 s for 30 s, 0.09 s for 15 s), so chunks cost the drafter less for about
    the same text (BENCHMARKS.md section 6, fifth session).
    """

    languages = frozenset({"en"})
    tasks = frozenset({"asr"})  # tiny.en cannot translate: a translation runs target-only

    def __init__(
        self,
        model_dir: str | Path | None = None,
        backend_device: str = "cpu",
        compute_type: str = "int8",
        preload_threads: Sequence[int] = (),
        preload_nice: Sequence[int] = (_DEFAULTS.drafter_nice, _DEFAULTS.guess_nice),
        first_call_tokens: int = 8,
        audio_margin_s: float | None = None,
        chunk_s: float | None = None,
        chunk_margin_s: float = 2.0,
    ):
        self._ct2 = _ctranslate2()
        model_dir = default_models_dir() / NAME if model_dir is None else model_dir
        self.dir, self.meta, self.tokenizer = read_model_folder(model_dir, CT2_FILES, INSTALL_HINT)
        self.name: str = self.meta["name"]
        self.vocabulary: str = self.meta["vocabulary"]
        self.read_special()
        self.eos_token: int = self.eot
        self.last_timestamp = self.meta["dims"]["n_vocab"] - 1
        self.n_mels: int = self.meta["dims"]["n_mels"]
        self.suppress_tokens: list[int] = [int(t) for t in self.meta["suppress_tokens"]]
        self.device, self.compute_type = backend_device, compute_type
        self.backend = "ctranslate2"
        if first_call_tokens < 0:
            raise ValueError(f"first_call_tokens must be 0 or more, got {first_call_tokens}")
        self.first_call_tokens = first_call_tokens
        if audio_margin_s is not None and audio_margin_s < 0:
            raise ValueError(f"audio_margin_s must be 0 or more, got {audio_margin_s}")
        self.audio_margin_s = audio_margin_s
        if chunk_s is not None and (audio_margin_s is None or chunk_s <= 0 or chunk_margin_s < 0):
            raise ValueError(f"chunk_s must be more than 0 with an audio margin and chunk_margin_s 0 or more, "
                             f"got chunk_s={chunk_s}, audio_margin_s={audio_margin_s}, chunk_margin_s={chunk_margin_s}")
        self.chunk_s, self.chunk_margin_s = chunk_s, chunk_margin_s
        self._models: dict[tuple[int, int | None], object] = {}
        self._lock = threading.Lock()
        for threads in preload_threads:
            for nice in sorted(set(preload_nice)):
                run_at_lower_priority(nice, lambda: self.model(threads))

    def model(self, threads: int):
        """The loaded ``ctranslate2.models.Whisper`` on ``threads`` threads at the calling thread's niceness."""
        key = (max(1, int(threads)), thread_niceness())
        with self._lock:
            if key not in self._models:
                self._models[key] = self._ct2.models.Whisper(
                    str(self.dir), device=self.device, compute_type=self.compute_type,
                    intra_threads=key[0], inter_threads=1)
            return self._models[key]

    def close(self) -> None:
        """Drop the loaded models (a server rebuilding a failed drafter): their worker threads end when
        the last job that uses them is done."""
        with self._lock:
            self._models.clear()

    @property
    def device_in_use(self) -> list[str]:
        """What really runs: CTranslate2's device and the compute type it resolved on this CPU."""
        with self._lock:
            models = list(self._models.values())
        if not models:
            return [f"ctranslate2:{self.device}"]
        return [f"ctranslate2:{models[0].device}:{models[0].compute_type}"]

    def prepare(self, request: Request, language: str, threads: int) -> Ct2DraftJob:
        """Encode the request's audio (the 30 s window, or its first chunk plus a margin) on the drafter's threads."""
        if language not in self.languages:
            raise ValueError(f"{self.name} drafts English only, not {language!r}")
        model = self.model(threads)
        prompt = self.decoder_prompt(request, language)
        max_draft = self.max_length - len(prompt)  # tokens a decode can add after the prompt
        if self.audio_margin_s is None:
            chunks = [(request_encoder_input(request, self.n_mels), max_draft, 0)]
        else:
            chunks = [(mel, min(cap, max_draft), offset) for mel, cap, offset in self._chunks(request)]
        return Ct2DraftJob(model, self.encode(model, chunks[0][0]), chunks, self, prompt, request.rules)

    def shift_timestamps(self, tokens: Sequence[int], offset: int) -> list[int]:
        """A chunk's tokens with its timestamps moved ``offset`` timestamps later (counting from the request's start)."""
        begin = self.timestamp_begin
        return [min(t + offset, self.last_timestamp) if t >= begin else t for t in tokens] if offset else list(tokens)

    def encode(self, model, mel: np.ndarray):
        """The encoder's output for one input of shape [1, n_mels, frames]."""
        return model.encode(self._ct2.StorageView.from_array(mel))

    def _chunks(self, request: Request) -> list[tuple[np.ndarray, int, int]]:
        """Encoder inputs (a chunk of the log-mel plus its margin) with their caps on drafted tokens and their starts
        (in timestamps)."""
        features = request_log_mel(request, self.n_mels)
        cuts = [0, features.shape[1]]
        if self.chunk_s is not None:
            cuts = quiet_cuts(features, int(self.chunk_s * SAMPLE_RATE / HOP_LENGTH))
        margin_s = self.audio_margin_s if len(cuts) == 2 else self.chunk_margin_s
        margin = int(margin_s * SAMPLE_RATE / HOP_LENGTH)
        sample_cuts = [cut * HOP_LENGTH for cut in cuts[:-1]] + [request.audio.size]
        chunks = []
        for (start, end), (first, last) in zip(pairwise(cuts), pairwise(sample_cuts)):
            frames = min(N_FRAMES, end - start + margin)
            mel = pad_or_trim(features[:, start:end], frames + frames % 2)[None]  # the encoder halves it
            cap = 16 + int(8 * (last - first) / request.sample_rate)
            chunks.append((mel, cap, round(first / (request.sample_rate * self.time_precision_s))))
        return chunks
