"""ONNX Runtime sessions for plugins that run a graph of their own (Parakeet, SenseVoice).

A session is built per thread count, once: building one costs more than running
a chunk. ``auto`` asks for NNAPI only where this build really has it.
"""
from __future__ import annotations

import threading
from pathlib import Path

from . import probe, providers_for


def ort_session(path: Path, device: str, threads: int):
    """An ``InferenceSession`` on ``device`` (cpu, nnapi, or auto) and a note saying which provider really runs it."""
    import onnxruntime as ort

    note = ""
    if device == "auto":
        device = "nnapi" if probe()["nnapi"] is None else "cpu"
        if device == "cpu":
            note = f" (this onnxruntime {ort.__version__} build has no NNAPI provider)"
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=providers_for(device))
    return session, f"running on {session.get_providers()[0]}{note}"


class OrtSessions:
    """One graph's ONNX Runtime sessions, one per thread count."""

    def __init__(self, path: Path, device: str) -> None:
        self.path, self.device = path, device
        self._sessions: dict[int, tuple] = {}
        self._lock = threading.Lock()

    def get(self, threads: int):
        """(session, note on the provider that really runs it) for ``threads``."""
        with self._lock:
            if threads not in self._sessions:
                self._sessions[threads] = ort_session(self.path, self.device, threads)
            return self._sessions[threads]

    @property
    def device_in_use(self) -> list[str]:
        return self.get(1)[0].get_providers()
