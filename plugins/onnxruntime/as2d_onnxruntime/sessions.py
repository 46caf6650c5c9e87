"""ONNX Runtime sessions for every plugin that runs an ONNX graph (Whisper, Parakeet, SenseVoice).

A session is built per thread count, once: building one costs more than running a decoder step or
a chunk, and a session's threads change mid-request. ``auto`` asks for NNAPI only where this build
really has it. One rule for all: sessions run sequentially and their idle workers never spin, because
as2d runs a target and a drafter at once on a few cores, and a spinning worker (ONNX Runtime's
default) eats the core the other model is computing on.
"""
from __future__ import annotations

import threading
from pathlib import Path

from . import probe, providers_for


def ort_session(path: Path, device: str, threads: int, profile_prefix: str | None = None):
    """An ``InferenceSession`` on ``device`` (cpu, nnapi, or auto) and a note saying which provider really runs it;
    with ``profile_prefix`` ONNX Runtime's profiler records every run (``end_profiling`` writes the file)."""
    import onnxruntime as ort

    note = ""
    if device == "auto":
        device = "nnapi" if probe()["nnapi"] is None else "cpu"
        if device == "cpu":
            note = f" (this onnxruntime {ort.__version__} build has no NNAPI provider)"
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
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
        threads = max(1, int(threads))
        with self._lock:
            if threads not in self._sessions:
                self._sessions[threads] = ort_session(self.path, self.device, threads)
            return self._sessions[threads]

    @property
    def device_in_use(self) -> list[str]:
        """The providers a session really runs on (one already built, else one built for this)."""
        with self._lock:
            built = next(iter(self._sessions.values()), None)
        return (built or self.get(1))[0].get_providers()
