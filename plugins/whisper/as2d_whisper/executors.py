"""The two small executors a Whisper model runs on: ONNX Runtime (``*.onnx``) and MNN (``*.mnn``).

ONNX Runtime binds the encoder's audio K/V once per request in place (IOBinding) and writes each call's new
self-attention K/V straight into the caller's cache; MNN runs the same graphs converted by
``as2d_whisper.convert.mnn.convert_mnn`` (``mnn_backend``).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from as2d_onnxruntime import providers_for
from as2d_onnxruntime.sessions import OrtSessions

from .graph_io import audio_feed

BACKENDS = ("onnxruntime", "mnn")


class OrtExecutor:
    """ONNX Runtime: each graph's sessions (one per thread count) from the ONNX Runtime backend plugin,
    which sets the one rule all as2d sessions share (see ``as2d_onnxruntime.sessions``)."""

    name = "onnxruntime"
    suffix = ".onnx"

    def __init__(self, model_dir: Path, device: str):
        self.dir, self.device = model_dir, device
        self.providers = providers_for(device)  # refuses at once a device this build lacks
        self._graphs: dict[str, OrtSessions] = {}
        self._lock = threading.Lock()

    def session(self, file: str, threads: int) -> ort.InferenceSession:
        with self._lock:
            graph = self._graphs.setdefault(file, OrtSessions(self.dir / file, self.device))
        return graph.get(threads)[0]

    def preload(self, files: Sequence[str], threads: int) -> None:
        for file in files:
            self.session(file, threads)

    @property
    def devices(self) -> list[str]:
        """Providers the ORT sessions report (what really runs, not what was asked)."""
        with self._lock:
            graphs = list(self._graphs.values())
        return graphs[0].device_in_use if graphs else list(self.providers)

    def encode(self, file: str, mel: np.ndarray, threads: int) -> np.ndarray:
        return self.session(file, threads).run(["cross_kv"], {"mel": mel})[0]

    def audio_input(self, cross_kv: np.ndarray) -> np.ndarray:
        """The encoder's audio K/V, contiguous: the decoder binds its blocks in place (``graph_io``)."""
        return np.ascontiguousarray(cross_kv, dtype=np.float32)

    def decoder(self, file: str, audio: np.ndarray, threads: int) -> "OrtDecoder":
        return OrtDecoder(self.session(file, threads), audio)


class OrtDecoder:
    """A decoder session with the audio K/V bound once, in place; new K/V land straight in the caller's cache.

    ``audio`` must outlive the decoder: the binding points into its memory (``DecoderState`` keeps it).
    """

    def __init__(self, session: ort.InferenceSession, audio: np.ndarray):
        self.session = session
        self.binding = session.io_binding()
        for name, block in audio_feed(audio).items():
            self.binding.bind_input(name, "cpu", 0, np.float32, list(block.shape), block.ctypes.data)

    @property
    def devices(self) -> list[str]:
        return self.session.get_providers()

    def run(self, ids: np.ndarray, cache: np.ndarray, p: int, k: int, logits: np.ndarray) -> None:
        row = cache[0].shape
        b = self.binding
        b.bind_cpu_input("tokens", ids)
        b.bind_input("past", "cpu", 0, np.float32, [p, *row], cache.ctypes.data)
        # new K/V land straight in the cache right after the first p positions.
        b.bind_output("new_kv", "cpu", 0, np.float32, [k, *row], cache[p:].ctypes.data)
        b.bind_output("logits", "cpu", 0, np.float32, [1, k, logits.shape[-1]], logits.ctypes.data)
        self.session.run_with_iobinding(b)


def executor_kind(backend: str) -> type:
    """The executor class of ``backend`` (its ``suffix`` names its graphs' files); the one check of the name."""
    if backend == "onnxruntime":
        return OrtExecutor
    if backend == "mnn":
        from .mnn_backend import MnnExecutor

        return MnnExecutor
    raise ValueError(f"unknown Whisper backend {backend!r}; choose one of {', '.join(BACKENDS)}")
