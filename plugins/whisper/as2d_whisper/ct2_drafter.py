"""whisper-tiny.en drafting on CTranslate2 (int8 weights, one thread): the cheapest drafter step we have.

CTranslate2's ``Whisper.generate`` runs a whole greedy decode in C++ and has no
single-step call and no per-token callback (4.x); a prompt prefix is not
prefilled but re-decoded token by token, so resuming costs as much as starting
over. A job therefore makes at most two calls on the request's encoded audio: a
short one whose tokens reach the target early, then the whole decode, whose
tokens past the first call's are new. The suppression lists are the ONNX
drafter's (from ``model.json``), so both drafters decode the same way.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from as2d_core.contracts import DraftPiece, Request
from as2d_core.options import DecodeOptions
from as2d_core.paths import models_dir as default_models_dir
from as2d_core.priority import run_at_lower_priority, thread_niceness

from .convert import CT2_FILES
from .features import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, encoder_input, pad_or_trim, shared_log_mel
from .runtime import TokenizerText, read_model_folder

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
    """Greedy decoding of one request on CTranslate2, from its audio and its own history only."""

    def __init__(self, model, features, source: "Ct2WhisperSource", max_new_tokens: int | None = None):
        self._model = model
        self._features = features
        self._source = source
        self.prompt = [source.sot, source.no_timestamps]
        self.max_new_tokens = min(max_new_tokens or source.max_length, source.max_length - len(self.prompt))
        self.ended_with_eos = False

    def decode(self, max_new_tokens: int) -> list[int]:
        """Greedy tokens after the prompt, at most ``max_new_tokens``, without the end token.

        CTranslate2 4.x stops a Whisper decode after ``max_length // 2`` tokens (measured
        with 4.8.5: the prompt does not count, the model's 448 positions cap it), hence the 2x.
        """
        result = self._model.generate(
            self._features, [self.prompt], beam_size=1, max_length=2 * max_new_tokens,
            suppress_blank=True, suppress_tokens=self._source.suppress_tokens)
        return [int(t) for t in result[0].sequences_ids[0]]

    def pieces(self) -> Iterator[DraftPiece]:
        """Up to two pieces: the first call's tokens, then the rest of the whole decode.

        Each piece is a boundary (publish now): its tokens were all ready at once.
        CTranslate2 returns no end token; a whole decode shorter than its limit ended on it.
        """
        drafted: list[int] = []
        first = self._source.first_call_tokens
        if 0 < first < self.max_new_tokens:
            drafted = self.decode(first)
            if drafted:
                yield DraftPiece(tokens=tuple(drafted), boundary=True)
        tokens = self.decode(self.max_new_tokens)
        # One deterministic decode extends the other; should they ever differ, the target still verifies.
        if tokens[len(drafted):]:
            yield DraftPiece(tokens=tuple(tokens[len(drafted):]), boundary=True)
        self.ended_with_eos = len(tokens) < self.max_new_tokens

    def close(self) -> None:
        self._features = None


class Ct2WhisperSource(TokenizerText):
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
    loops on short clips (seen with 0-2 s, not with 6 s on the English dev windows),
    so the drafted length is also capped at ``16 + 8 tokens/s`` of audio.
    """

    languages = frozenset({"en"})

    def __init__(
        self,
        model_dir: str | Path | None = None,
        backend_device: str = "cpu",
        compute_type: str = "int8",
        preload_threads: Sequence[int] = (),
        preload_nice: Sequence[int] = (_DEFAULTS.drafter_nice, _DEFAULTS.guess_nice),
        first_call_tokens: int = 8,
        audio_margin_s: float | None = None,
    ):
        self._ct2 = _ctranslate2()
        model_dir = default_models_dir() / NAME if model_dir is None else model_dir
        self.dir, self.meta, self.tokenizer = read_model_folder(model_dir, CT2_FILES, INSTALL_HINT)
        self.name: str = self.meta["name"]
        self.vocabulary: str = self.meta["vocabulary"]
        special = self.meta["special"]
        self.sot, self.eot, self.no_timestamps = special["sot"], special["eot"], special["no_timestamps"]
        self.eos_token: int = self.eot
        self.max_length: int = self.meta["max_length"]
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
        """Encode the request's audio (the 30 s window, or the audio plus a margin) on the drafter's threads."""
        if language not in self.languages:
            raise ValueError(f"{self.name} drafts English only, not {language!r}")
        model = self.model(threads)
        cap = None
        if self.audio_margin_s is None:
            mel = encoder_input(request.audio, self.n_mels)
        else:
            features = shared_log_mel(request.audio, self.n_mels)
            frames = features.shape[1] + int(self.audio_margin_s * SAMPLE_RATE / HOP_LENGTH)
            mel = pad_or_trim(features, min(N_FRAMES, frames + frames % 2))[None]  # the encoder halves it
            cap = 16 + int(8 * request.audio.size / request.sample_rate)
        features = model.encode(self._ct2.StorageView.from_array(mel))
        return Ct2DraftJob(model, features, self, max_new_tokens=cap)
