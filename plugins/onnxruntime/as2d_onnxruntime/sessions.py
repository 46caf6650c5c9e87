"""ONNX Runtime sessions for every plugin that runs an ONNX graph (Whisper, Parakeet, SenseVoice).

A session is built per thread count, once: building one costs more than running a decoder step or
a chunk, and a session's threads change mid-request. ``auto`` asks for NNAPI only where this build
really has it. One rule for all: sessions run sequentially and their idle workers never spin, because
as2d runs a target and a drafter at once on a few cores, and a spinning worker (ONNX Runtime's
default) eats the core the other model is computing on.

On the CPU a graph runs from this machine's optimized copy (``optimized_copy``): ONNX Runtime's optimized
graph with the packed weights its kernels compute from saved beside it, made on first use. Its sessions map
the packed weights from that file instead of each packing its own copy, so a graph's sessions at several
thread counts, and the processes that load it, share one copy in memory, and a session builds sooner. All
sessions draw their working memory from one arena (``_shared_arena``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import tempfile
import threading
from functools import cache
from pathlib import Path

from . import probe, providers_for

OPTIMIZED_DIR = ".onnxruntime"  # in the graph's folder: removed with the graphs it derives from
_log = logging.getLogger(__name__)


@cache
def _shared_arena() -> None:
    """One CPU memory arena for all of this process's sessions, grown by what is asked rather than doubled.

    By default every session keeps an arena of its own that doubles as it grows and never shrinks: whisper-base's
    encoder and its decoder at two thread counts held about 240 MB more after a few 30 s windows than they used."""
    import onnxruntime as ort

    cpu = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    try:
        ort.create_and_register_allocator(cpu, ort.OrtArenaCfg(0, 1, -1, -1))  # 1: kSameAsRequested
    except Exception as error:  # onnxruntime's own error type: the host application registered one already
        _log.info("onnxruntime's shared CPU arena is the one registered before (%s)", error)


def _options(threads: int):
    import onnxruntime as ort

    _shared_arena()
    options = ort.SessionOptions()
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


@cache
def machine_tag() -> str:
    """ONNX Runtime's version and this processor (model and instruction-set flags): an optimized graph holds
    kernels and weight layouts chosen for them, so it runs only where it was made."""
    import onnxruntime as ort

    cpu = ""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = "\n".join(sorted({line for line in lines if line.startswith(("model name", "flags", "Features",
                                                                             "CPU part", "CPU implementer"))}))
    except OSError:  # no /proc (macOS, Windows): the host's name stands for its processor
        cpu = f"{platform.processor()}\n{platform.node()}"
    digest = hashlib.sha256(f"{platform.machine()}\n{cpu}".encode()).hexdigest()[:16]
    return f"ort{ort.__version__}-{platform.machine()}-{digest}"


def _identity(path: Path) -> str:
    """The graph's files as they are now (size and modification time of the graph and its weights): a model
    converted again gets a new optimized copy."""
    parts = [path, path.with_name(path.name + ".data")]
    stats = [f"{p.name}:{s.st_size}:{s.st_mtime_ns}" for p in parts if p.is_file() for s in [p.stat()]]
    return hashlib.sha256("|".join(stats).encode()).hexdigest()[:16]


def optimized_copy(path: Path) -> Path | None:
    """This machine's optimized copy of the graph at ``path``, made on first use: ONNX Runtime's optimized graph
    with its packed weights saved beside it (``session.save_external_prepacked_constant_initializers``), in
    ``.onnxruntime/`` in the graph's folder. It computes the same bits as the graph it comes from (the tests
    compare them). None where it cannot be made (a read-only folder, a full disk): the graph then runs as it is.
    Two processes making it at once each write their own and the first rename wins."""
    import onnxruntime as ort

    home = path.parent / OPTIMIZED_DIR / machine_tag()
    made = home / f"{path.name}-{_identity(path)}"
    copy = made / path.name
    if copy.is_file():
        return copy
    work = None
    try:
        home.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=home, prefix=".making-"))
        options = _options(1)
        options.log_severity_level = 3  # its warning that the copy suits this machine only is the point here
        options.optimized_model_filepath = str(work / path.name)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                         path.name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        options.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for stale in home.glob(f"{path.name}-*"):  # the graph's copies before a conversion, or one left half made
            if stale != made or not copy.is_file():
                shutil.rmtree(stale, ignore_errors=True)
        for older in home.parent.glob(f"ort*/{path.name}-*"):  # another onnxruntime's (an upgrade's) copies
            if not older.parent.name.startswith(f"ort{ort.__version__}-"):
                shutil.rmtree(older, ignore_errors=True)
        os.rename(work, made)
    except Exception as error:  # OSError, or onnxruntime's errors (which derive from Exception) writing the copy
        if not copy.is_file():  # not another process's copy, renamed first
            _log.info("no optimized copy of %s (%s): its sessions pack their own weights", path, error)
            return None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return copy


def ort_session(path: Path, device: str, threads: int, profile_prefix: str | None = None):
    """An ``InferenceSession`` on ``device`` (cpu, nnapi, or auto) and a note saying which provider really runs it;
    with ``profile_prefix`` ONNX Runtime's profiler records every run (``end_profiling`` writes the file). On the
    CPU it runs this machine's optimized copy of the graph (``optimized_copy``), where one can be made."""
    import onnxruntime as ort

    note = ""
    if device == "auto":
        device = "nnapi" if probe()["nnapi"] is None else "cpu"
        if device == "cpu":
            note = f" (this onnxruntime {ort.__version__} build has no NNAPI provider)"
    options = _options(threads)
    graph = optimized_copy(Path(path)) if device == "cpu" else None
    if graph is not None:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # optimized already
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    session = ort.InferenceSession(str(graph or path), options, providers=providers_for(device))
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
