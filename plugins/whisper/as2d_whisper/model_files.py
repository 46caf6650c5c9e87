"""A loaded Whisper model: its folder, its executor, its suppressions, the audio K/V it encodes, and a request's
decoder state.

The decoder state keeps the self-attention cache in a preallocated numpy buffer whose first positions are
contiguous, so appending is a write and rejecting is a length change, and holds the audio K/V once per
request.
"""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.contracts import Request
from as2d_core.setup.paths import absent_files

from .executors import executor_kind
from .features import request_encoder_input
from .vocabulary import INSTALL_HINT, WhisperVocabulary, read_model_folder

MNN_INSTALL_HINT = ("run `python -m as2d_whisper.convert --mnn whisper-base whisper-tiny.en` (converts the installed "
                    "ONNX models; `as2d models install` does it too when MNN is installed)")


class ModelFiles(WhisperVocabulary):
    """A converted model folder: metadata, tokenizer and the executor of one backend.

    ``decoder`` is the decoder graph's stem (``decoder`` or ``decoder.int8``);
    the backend adds its suffix (``.onnx`` or ``.mnn``).
    """

    def __init__(self, model_dir: str | Path, decoder: str, device: str, backend: str = "onnxruntime",
                 install_hint: str = INSTALL_HINT):
        kind = executor_kind(backend)
        self.encoder_file, self.decoder_file = "encoder" + kind.suffix, decoder + kind.suffix
        hint = install_hint
        model_dir = Path(model_dir).expanduser()
        if backend == "mnn" and not absent_files(model_dir, ("model.json", "tokenizer.json")):
            hint = MNN_INSTALL_HINT
        self.dir, self.meta, self.tokenizer = read_model_folder(model_dir, [self.encoder_file, self.decoder_file], hint)
        self.backend = backend
        self.device = device
        self.executor = kind(self.dir, device)
        dims = self.meta["dims"]
        self.n_layers, self.n_heads = dims["decoder_layers"], dims["decoder_heads"]
        self.head_dim = dims["d_model"] // dims["decoder_heads"]
        self.n_vocab, self.n_mels = dims["n_vocab"], dims["n_mels"]
        self.read_special()
        self.suppress = np.asarray(self.meta["suppress_tokens"], dtype=np.int64)
        self.suppress_blank = np.asarray(self.meta["suppress_blank"], dtype=np.int64)
        self._lock = threading.Lock()
        # Opt-in reuse of prepared audio K/V for repeated requests on the same audio (tests, sweeps).
        # Off by default so end-to-end timings always include the encoder.
        self.audio_cache_size = 0
        self._audio_cache: dict[bytes, np.ndarray] = {}

    def preload(self, thread_counts: Sequence[int], encoder_threads: Sequence[int] | None = None) -> None:
        """Build the sessions a request will use now, at load time, so no request pays for them: the decoder's at
        each of ``thread_counts``, the encoder's at ``encoder_threads`` (default: the same); any other is built
        when first used."""
        for threads in thread_counts:
            self.executor.preload([self.decoder_file], threads)
        for threads in thread_counts if encoder_threads is None else encoder_threads:
            self.executor.preload([self.encoder_file], threads)

    @property
    def device_in_use(self) -> list[str]:
        """What really runs: ORT's session providers, or MNN's backend (the probe refuses silent fallbacks)."""
        return self.executor.devices

    def cross_kv(self, mel: np.ndarray, threads: int) -> np.ndarray:
        return self.executor.encode(self.encoder_file, mel, threads)

    def audio_kv(self, request: Request, threads: int) -> np.ndarray:
        """The request's audio K/V from the encoder (or, with ``audio_cache_size``, the cache's copy)."""
        key = None
        if self.audio_cache_size:
            key = hashlib.sha1(request.audio.tobytes()).digest()
            with self._lock:
                if key in self._audio_cache:
                    return self._audio_cache[key]
        cross = self.cross_kv(request_encoder_input(request, self.n_mels), threads)
        if key is not None:
            with self._lock:
                while len(self._audio_cache) >= self.audio_cache_size:
                    self._audio_cache.pop(next(iter(self._audio_cache)))
                self._audio_cache[key] = cross
        return cross



class DecoderState:
    """The self-attention cache plus the audio K/V of one request, on the model's executor."""

    def __init__(self, model: ModelFiles, cross_kv: np.ndarray, threads: int):
        self.model = model
        self.cache = np.zeros((model.max_length, model.n_layers, 2, model.n_heads, model.head_dim), np.float32)
        self.length = 0  # positions (prompt + response) held in the cache
        self.audio = model.executor.audio_input(cross_kv)
        self.logits = np.empty((1, 1, model.n_vocab), np.float32)
        self.bind(threads)

    def bind(self, threads: int) -> None:
        """(Re)bind the audio K/V once to the decoder for ``threads``."""
        self.threads = threads
        self.decoder = self.model.executor.decoder(self.model.decoder_file, self.audio, threads)

    @property
    def devices(self) -> list[str]:
        return self.decoder.devices

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        """Run the decoder on ``tokens`` after the cache; returns logits [K, vocab] (a reused buffer)."""
        k, p = len(tokens), self.length
        if k == 0:
            raise ValueError("append needs at least one token")
        if p + k > self.model.max_length:
            raise ValueError(f"decoder context is {self.model.max_length} positions; {p} + {k} exceeds it")
        if self.logits.shape[1] < k:
            self.logits = np.empty((1, max(k, 2 * self.logits.shape[1]), self.model.n_vocab), np.float32)
        ids = np.asarray(tokens, dtype=np.int64).reshape(1, k)
        self.decoder.run(ids, self.cache, p, k, self.logits)
        self.length = p + k
        return self.logits[0, :k]

    def close(self) -> None:
        self.decoder = None
        self.audio = None
        self.cache = np.zeros((0,), np.float32)


def top_probability(row: np.ndarray) -> float:
    """Softmax probability of the arg-max entry of one logits row."""
    return 1.0 / float(np.exp(row - row.max()).sum())


def probability(row: np.ndarray, token: int) -> float:
    """Softmax probability of ``token`` in one logits row."""
    row = row.astype(np.float64)
    weights = np.exp(row - row.max())
    return float(weights[token] / weights.sum())
