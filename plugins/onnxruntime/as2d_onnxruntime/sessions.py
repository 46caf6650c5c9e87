"""ONNX Runtime sessions for every plugin that runs an ONNX graph (Whisper, Parakeet, SenseVoice).

A session is built per thread count, once: building one costs more than running a decoder step or
a chunk, and a session's threads change mid-request. ``auto`` asks for NNAPI only where this build
really has it. One rule for all: sessions run sequentially and their idle workers never spin, because
as2d runs a target and a drafter at once on a few cores, and a spinning worker (ONNX Runtime's
default) eats the core the other model is computing on.

On the CPU a graph runs from this machine's optimized copy (``optimized_copy``): ONNX Runtime's optimized
graph with the packed weights its kernels compute from saved beside it, made on first use. Its sessions map
the packed weights from that file instead of each packing its own copy, so a graph's sessions at several
thread counts, the other graphs of its folder that hold the same weights, and the processes that load them
share one copy in memory, and a session builds sooner. All
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
import time
from functools import cache
from pathlib import Path

from . import probe, providers_for

OPTIMIZED_DIR = ".onnxruntime"  # in the graph's folder: removed with the graphs it derives from
WEIGHTS_FILE = "weights.data"  # every optimized graph of a folder reads its weights from this one file
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
    # No memory pattern: from its second run a graph would take its activations as one block of the arena, which
    # the previous run's outputs still alive (a request's audio K/V) keep from reusing what the first run freed:
    # whisper-base's encoder grew the arena by 148 MB more on its second window. Allocated one by one, the same
    # bits (tested), as fast, 66-80 MB less at a 330 s transcription's peak (BENCHMARKS.md section 41).
    options.enable_mem_pattern = False
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


def _identity(folder: Path) -> str:
    """The folder's graphs as they are now (size and modification time of each graph and its weights): a model
    converted again gets a new optimized copy."""
    parts = sorted(part for graph in folder.glob("*.onnx") for part in (graph, graph.with_name(graph.name + ".data")))
    stats = [f"{p.name}:{s.st_size}:{s.st_mtime_ns}" for p in parts if p.is_file() for s in [p.stat()]]
    return hashlib.sha256("|".join(stats).encode()).hexdigest()[:16]


def _blocks(tensor) -> list[tuple[int, int]] | None:
    """(offset, length) of each block of its data file that an external initializer reads: its own bytes, then
    each packed copy ONNX Runtime saved with it (``prepacked_N``: ``kernel key|offset;length;alignment``, one
    block after each ``|``). None for a tensor kept inside the graph."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    if "location" not in entries or "length" not in entries:
        return None
    blocks = [(int(entries.get("offset", 0)), int(entries["length"]))]
    for key, value in entries.items():
        if key.startswith("prepacked"):
            blocks += [(int(offset), int(length)) for offset, length, *_ in
                       (block.split(";") for block in value.split("|")[1:])]
    return blocks


def _relocate(tensor, location: str, offsets: list[int]) -> None:
    """Point an external initializer's blocks (in ``_blocks`` order) at ``offsets`` in the file ``location``."""
    first, *packed = offsets
    entries = {entry.key: entry for entry in tensor.external_data}
    entries["location"].value = location
    if "offset" in entries:
        entries["offset"].value = str(first)
    else:
        tensor.external_data.add(key="offset", value=str(first))
    for entry in tensor.external_data:
        if entry.key.startswith("prepacked"):
            name, *blocks = entry.value.split("|")
            blocks = [";".join([str(packed.pop(0)), *block.split(";")[1:]]) for block in blocks]
            entry.value = "|".join([name, *blocks])


def _pool_weights(work: Path, graphs: list[Path]) -> None:
    """Write the weights of the optimized ``graphs`` in ``work`` into one file, ``WEIGHTS_FILE``, each distinct
    block once, and point every graph at it.

    A model's graphs carry the same weights (whisper's decoder and its beams, windows and aligner variants), and
    ONNX Runtime packs them the same way, yet each optimized graph saves its own: a process running the decoder
    and the beams graph mapped two files of the same bytes, 236 MB each for whisper-base. From one file the same
    bytes are the same pages. Blocks are compared by their bytes, so every graph reads what it read before."""
    import mmap

    try:
        import onnx
    except ImportError:  # onnxruntime runs without it (a phone): each graph keeps its own file
        _log.info("onnx is not installed: each optimized graph in %s keeps its weights in a file of its own", work)
        return
    offsets: dict[tuple[int, bytes], int] = {}
    with open(work / WEIGHTS_FILE, "wb") as pool:
        for graph in graphs:
            model = onnx.load(str(graph), load_external_data=False)
            own = graph.with_name(graph.name + ".data")
            if own.is_file() and own.stat().st_size:
                with open(own, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                    for tensor in model.graph.initializer:
                        placed = []
                        for offset, length in _blocks(tensor) or []:
                            block = data[offset:offset + length]
                            key = (length, hashlib.blake2b(block, digest_size=20).digest())
                            if key not in offsets:  # each at a page boundary, as ONNX Runtime maps them
                                pool.write(bytes(-pool.tell() % mmap.PAGESIZE))
                                offsets[key] = pool.tell()
                                pool.write(block)
                            placed.append(offsets[key])
                        if placed:
                            _relocate(tensor, WEIGHTS_FILE, placed)
            onnx.save(model, str(graph))
            own.unlink(missing_ok=True)


def optimized_copy(path: Path) -> Path | None:
    """This machine's optimized copy of the graph at ``path``: ONNX Runtime's optimized graph with the packed
    weights its kernels read saved beside it (``session.save_external_prepacked_constant_initializers``), made on
    first use, in ``.onnxruntime/`` in the graph's folder. It computes the same bits as the graph it comes from
    (the tests compare them). The first use makes the copies of all the folder's graphs at once, with the weights
    of all of them in one file (``_pool_weights``), so that graphs sharing weights share their pages. None where
    it cannot be made (a read-only folder, a full disk, a graph ONNX Runtime cannot optimize): the graph then runs
    as it is. Two processes making it at once each write their own and the first rename wins."""
    folder = path.parent
    home = folder / OPTIMIZED_DIR / machine_tag()
    made = home / _identity(folder)
    if not made.is_dir():
        _make_copies(folder, home, made)
    copy = made / path.name
    return copy if copy.is_file() else None


def _make_copies(folder: Path, home: Path, made: Path) -> None:
    """Make the optimized copies of all of ``folder``'s graphs in ``made`` (``optimized_copy``), or log why not."""
    import onnxruntime as ort

    work = None
    try:
        home.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=home, prefix=".making-"))
        optimized = []
        for graph in sorted(folder.glob("*.onnx")):
            options = _options(1)
            options.log_severity_level = 3  # its warning that the copy suits this machine only is the point here
            options.optimized_model_filepath = str(work / graph.name)
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                             graph.name + ".data")
            options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                             "1024")
            options.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
            try:
                ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
                optimized.append(work / graph.name)
            except Exception as error:  # onnxruntime's errors derive from Exception: this graph runs as it is
                _log.info("no optimized copy of %s (%s): its sessions pack their own weights", graph, error)
                for made_part in work.glob(f"{graph.name}*"):
                    made_part.unlink()
        if not optimized:
            raise RuntimeError("ONNX Runtime optimized none of the folder's graphs")
        _pool_weights(work, optimized)
        for stale in home.glob("*"):  # the folder's copies before a conversion (or in an older layout)
            if stale != made and not stale.name.startswith(".making-"):
                shutil.rmtree(stale, ignore_errors=True)
        for left in home.glob(".making-*"):  # a maker that died an hour ago or more, not one at work now
            if left != work and time.time() - left.stat().st_mtime > 3600:
                shutil.rmtree(left, ignore_errors=True)
        for older in home.parent.glob("ort*"):  # another onnxruntime's (an upgrade's) copies
            if not older.name.startswith(f"ort{ort.__version__}-"):
                shutil.rmtree(older, ignore_errors=True)
        os.rename(work, made)
    except Exception as error:  # OSError, or onnx's and onnxruntime's errors writing the copies
        if not made.is_dir():  # not another process's copy, renamed first
            _log.info("no optimized copies in %s (%s): their sessions pack their own weights", folder, error)
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


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
