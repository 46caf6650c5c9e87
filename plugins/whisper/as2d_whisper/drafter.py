"""The Whisper drafter: greedy decoding from the request's audio, its prompt and its own history only."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from as2d_core.contracts import DraftPiece, Request
from as2d_core.setup.paths import models_dir as default_models_dir

from .masks import ScoreMasks
from .model_files import DecoderState, ModelFiles, top_probability
from .target import WhisperTargetSession


class WhisperDraftJob:
    """Greedy tiny.en decoding for one request, from its audio, its prompt and its own history only
    (in timestamp mode under Whisper's timestamp rules, as the target decodes)."""

    def __init__(self, model: ModelFiles, request: Request, threads: int, language: str = "en"):
        self.model = model
        self.state = DecoderState(model, model.audio_kv(request, threads), threads)
        self.prompt = model.decoder_prompt(request, language)
        self.masks = ScoreMasks(model, request)  # the target's masks, its forced prefix aside
        self.max_new_tokens = model.max_length - len(self.prompt)
        self.ended_with_eos = False

    def pieces(self) -> Iterator[DraftPiece]:
        model, state = self.model, self.state
        logits = state.append(self.prompt)[-1:]
        drafted: list[int] = []
        for _ in range(self.max_new_tokens):
            row = self.masks.rows(logits[:1], drafted[:-1], drafted[-1:])[0] if drafted else self.masks.first(logits[0])
            tok = int(np.argmax(row))
            drafted.append(tok)
            if tok == model.eot:
                self.ended_with_eos = True
                return
            yield DraftPiece(tokens=(tok,), confidences=(top_probability(row),))
            if state.length >= model.max_length:
                return
            logits = state.append([tok])

    def close(self) -> None:
        self.state.close()


class WhisperSource:
    """whisper-tiny.en as an English drafter (int8 decoder by default: its precision never affects output).

    On MNN the int8 decoder is ``decoder.int8.mnn`` (MNN weight quantization of the fp32 graph).
    """

    languages = frozenset({"en"})
    tasks = frozenset({"asr"})  # tiny.en cannot translate: a translation runs target-only

    def __init__(
        self,
        model_dir: str | Path | None = None,
        quantized: bool = True,
        backend_device: str = "cpu",
        audio_cache: int = 0,
        preload_threads: Sequence[int] = (),
        backend: str = "onnxruntime",
    ):
        model_dir = default_models_dir() / "whisper-tiny.en" if model_dir is None else model_dir
        self.model = ModelFiles(model_dir, "decoder.int8" if quantized else "decoder", backend_device, backend)
        self.model.audio_cache_size = audio_cache
        self.model.preload(preload_threads)
        self.name: str = self.model.meta["name"]
        self.vocabulary: str = self.model.meta["vocabulary"]
        self.eos_token: int = self.model.eot
        self.timestamp_begin, self.time_precision_s = self.model.timestamp_begin, self.model.time_precision_s
        self.backend = backend
        if self.model.meta["multilingual"]:  # a multilingual model you bring drafts its languages and translation
            self.languages = frozenset(self.model.language_ids)
            self.tasks = frozenset({"asr", "translate"})

    @property
    def device_in_use(self) -> list[str]:
        return self.model.device_in_use

    def prepare(self, request: Request, language: str, threads: int) -> WhisperDraftJob:
        if language not in self.languages:
            raise ValueError(f"{self.name} does not draft {language!r}")
        return WhisperDraftJob(self.model, request, threads, language)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.model.decode_text(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self.model.encode_text(text)

    def prefix_session(self, request: Request, language: str, threads: int) -> WhisperTargetSession:
        """The drafter as a session that can be fed the committed prefix (serial baselines)."""
        if language not in self.languages:
            raise ValueError(f"{self.name} does not draft {language!r}")
        return WhisperTargetSession(self, request, threads)
