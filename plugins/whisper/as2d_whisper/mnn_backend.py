"""The Whisper graphs on MNN (``MNN.nn`` modules with dynamic input shapes).

``encoder.mnn`` and ``decoder.mnn`` are ``mnnconvert`` translations of the ONNX
graphs, with the same inputs and outputs, so the runtime keeps one session
interface and only the executor differs: ONNX Runtime binds buffers through
IOBinding, MNN takes input variables and returns output variables that are
copied into the same numpy cache and logits buffers.

Notes on MNN 3.6.1 (PyPI wheel):
- it prints a CPU-feature banner to stdout when imported and a line per runtime
  created with ``precision: high``; both go to stderr here, since stdout belongs
  to ``as2d run --json``;
- the wheel is CPU-only: asking for OpenCL runs on CPU without saying so, so the
  device is checked with the MNN backend plugin's probe and refused;
- the thread count is a property of a runtime manager, so a module is loaded per
  (graph, thread count), as ONNX Runtime needs a session per thread count;
- its Python calls keep the GIL while MNN computes (unlike ONNX Runtime), so two
  models driven from two Python threads do not overlap: two 1-thread decoders in
  two threads took 2.1x one decoder's time (ONNX Runtime: 1.4x). A drafter
  thread is starved while an MNN target verifies, so as2d with an MNN target
  runs its drafter in its own process (``whisper-tiny.en+process``,
  ``as2d_core.workers.process_source``);
- ``decoder.int8.mnn`` (8-bit weights) was no faster than fp32 on an x86 CPU:
  the Python runtime config cannot select MNN's low-memory (int8 compute) mode.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.workers.native import import_quietly, native_stdout_to_stderr

from .graph_io import audio_feed, audio_input_names

DEVICES = ("cpu", "opencl")
# The graph contract shared with the ONNX export (convert/onnx_export.py); the decoder's audio inputs follow
# these (one per layer and kind, ``graph_io``).
GRAPH_IO = {
    "encoder": (["mel"], ["cross_kv"]),
    "decoder": (["tokens", "past"], ["logits", "new_kv"]),
}
INSTALL_MNN = "pip install MNN (or `pip install ./plugins/mnn`)"


def import_mnn():
    """``MNN`` with its import banner kept off stdout; a clear error if it is not installed."""
    try:
        return import_quietly("MNN", "MNN.expr", "MNN.nn")
    except ImportError as exc:
        raise RuntimeError(f"the Whisper MNN backend needs MNN: {INSTALL_MNN} ({exc})") from exc


def device_problem(device: str) -> str | None:
    """None if ``device`` really runs on this MNN build, else why not (the MNN backend plugin's probe)."""
    if device not in DEVICES:
        return f"unknown MNN device {device!r}; choose one of {', '.join(DEVICES)}"
    try:
        from as2d_mnn import probe
    except ImportError:
        return None if device == "cpu" else (
            "the MNN backend plugin (as2d_mnn) is not installed to probe it: `pip install ./plugins/mnn`")
    return probe().get(device, "not reported by the MNN probe")


def mnn_version() -> str:
    MNN = import_mnn()
    return str(getattr(MNN, "version", lambda: "unknown")())


class MnnExecutor:
    """Loads and runs the ``.mnn`` graphs of one model folder."""

    name = "mnn"
    suffix = ".mnn"

    def __init__(self, model_dir: Path, device: str = "cpu"):
        problem = device_problem(device)
        if problem is not None:
            raise RuntimeError(f"MNN device {device!r} does not run here: {problem}")
        MNN = import_mnn()
        self._nn, self._F = MNN.nn, MNN.expr
        self.dir = Path(model_dir)
        self.device = device
        self._backend = {"cpu": "CPU", "opencl": "OPENCL"}[device]
        self._modules: dict[tuple[str, int], object] = {}
        self._lock = threading.Lock()
        self._layers = json.loads((self.dir / "model.json").read_text())["dims"]["decoder_layers"]

    def module(self, file: str, threads: int):
        threads = max(1, int(threads))
        key = (file, threads)
        with self._lock:
            if key not in self._modules:
                graph = file.split(".")[0]
                inputs, outputs = GRAPH_IO[graph]
                if graph == "decoder":
                    inputs = [*inputs, *audio_input_names(self._layers)]
                with native_stdout_to_stderr():
                    runtime = self._nn.create_runtime_manager(
                        ({"backend": self._backend, "numThread": threads, "precision": "high"},))
                    module = self._nn.load_module_from_file(
                        str(self.dir / file), inputs, outputs, runtime_manager=runtime, shape_mutable=True)
                if module is None:
                    raise RuntimeError(f"MNN could not load {self.dir / file}")
                self._modules[key] = (module, runtime)
            return self._modules[key][0]

    def preload(self, files: Sequence[str], threads: int) -> None:
        for file in files:
            self.module(file, threads)

    @property
    def devices(self) -> list[str]:
        return [f"MNN:{self._backend}"]

    def _const(self, array: np.ndarray, dtype=None):
        F = self._F
        array = np.ascontiguousarray(array)
        return F.const(array, list(array.shape), F.NCHW, F.float if dtype is None else dtype)

    def _read(self, var) -> np.ndarray:
        F = self._F
        if var.data_format == F.NC4HW4:
            var = F.convert(var, F.NCHW)
        return var.read()

    def encode(self, file: str, mel: np.ndarray, threads: int) -> np.ndarray:
        (cross,) = self.module(file, threads).onForward([self._const(np.asarray(mel, np.float32))])
        return np.array(self._read(cross), dtype=np.float32, copy=True)

    def audio_input(self, cross_kv: np.ndarray) -> list:
        """The audio K/V as the decoder's MNN input variables, built once per request."""
        return [self._const(block) for block in audio_feed(np.asarray(cross_kv, np.float32)).values()]

    def decoder(self, file: str, audio, threads: int) -> "MnnDecoder":
        return MnnDecoder(self, self.module(file, threads), audio)


class MnnDecoder:
    """One decoder module with the request's audio K/V; outputs are copied into the caller's buffers."""

    def __init__(self, executor: MnnExecutor, module, audio):
        self._executor, self._module, self._audio = executor, module, audio
        self.devices = executor.devices

    def run(self, ids: np.ndarray, cache: np.ndarray, p: int, k: int, logits: np.ndarray) -> None:
        ex = self._executor
        tokens = ex._const(ids.astype(np.int32), ex._F.int)
        past = ex._const(cache[:p])
        out_logits, new_kv = self._module.onForward([tokens, past, *self._audio])
        logits[0, :k] = ex._read(out_logits).reshape(k, -1)
        cache[p:p + k] = ex._read(new_kv).reshape(k, *cache.shape[1:])
