"""MNN graphs (``encoder.mnn``, ``decoder.mnn``; fp32 weights, and for the drafter also an 8-bit
weight-quantized ``decoder.int8.mnn``) from an installed ONNX folder.

MNN's converter is called through its Python extension, never the ``mnnconvert`` console script
(which installs a logging SDK and uploads usage logs). The graphs are checked against ONNX Runtime on
random inputs and the result is recorded in model.json under ``"mnn"``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..graph_io import audio_feed
from .onnx_export import DECODER_FILE, DECODER_INT8_FILE, ENCODER_FILE, widened

MNN_ENCODER_FILE, MNN_DECODER_FILE, MNN_DECODER_INT8_FILE = "encoder.mnn", "decoder.mnn", "decoder.int8.mnn"


# MNN's converter, run in a child process: its Python wrapper imports MNN's usage logger (which
# pip-installs a logging SDK and contacts a remote endpoint), so we register an empty stand-in for
# it and call the C extension directly; the child also keeps the converter's output and any crash
# away from the caller.
_MNNCONVERT_CHILD = r"""
import sys, types
log = types.ModuleType("MNN.tools.utils.log")
log.mnn_logger = None
sys.modules["MNN.tools.utils.log"] = log
import _tools
_tools.mnnconvert(["mnnconvert"] + sys.argv[1:])
"""


def _mnnconvert(src: Path, dst: Path, extra: tuple[str, ...] = ()) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    # Exact GELU (erf), as in the ONNX graph, rather than MNN's tanh approximation.
    cmd = [sys.executable, "-c", _MNNCONVERT_CHILD, "-f", "ONNX", "--modelFile", str(src.resolve()),
           "--MNNModel", str(tmp.resolve()), "--bizCode", "as2d", "--useGeluApproximation", "0", *extra]
    # The converter keeps its weights in a scratch file of a fixed name in its working folder: a folder of its
    # own, so that two conversions at once (two models installed side by side) do not write the same file.
    with tempfile.TemporaryDirectory(prefix="as2d-mnnconvert-") as scratch:
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=scratch)
    if run.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(
            f"MNN conversion of {src} failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    tmp.replace(dst)


def mnn_files(model_dir: str | Path) -> list[str]:
    """The MNN graphs convert_mnn writes into an installed folder (the int8 decoder only beside an int8 ONNX one)."""
    files = [MNN_ENCODER_FILE, MNN_DECODER_FILE]
    if (Path(model_dir) / DECODER_INT8_FILE).is_file():
        files.append(MNN_DECODER_INT8_FILE)
    return files


def _validate_mnn(model_dir: Path, dims: dict, threads: int = 2) -> dict[str, float]:
    """Max |MNN - ONNX Runtime| on random audio features and caches with and without history."""
    import onnxruntime as ort

    from ..mnn_backend import MnnExecutor

    rng = np.random.default_rng(0)
    mel = rng.uniform(-1.0, 1.5, size=(1, dims["n_mels"], 2 * dims["n_audio_ctx"])).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    enc = ort.InferenceSession(str(model_dir / ENCODER_FILE), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(model_dir / DECODER_FILE), opts, providers=["CPUExecutionProvider"])
    mnn = MnnExecutor(model_dir, "cpu")
    cross_o = enc.run(None, {"mel": mel})[0]
    cross_m = mnn.encode(MNN_ENCODER_FILE, mel, threads)
    diffs = {"cross_kv": float(np.abs(cross_o - cross_m).max()), "logits": 0.0, "new_kv": 0.0}
    # The decoder gets ONNX Runtime's audio K/V so its own difference is measured.
    decoder = mnn.decoder(MNN_DECODER_FILE, mnn.audio_input(cross_o), threads)
    hd = dims["d_model"] // dims["decoder_heads"]
    row = (dims["decoder_layers"], 2, dims["decoder_heads"], hd)
    for n_past, k in ((0, 4), (7, 1), (7, 5)):
        tokens = rng.integers(0, dims["n_vocab"], size=(1, k)).astype(np.int64)
        past = rng.normal(size=(n_past, *row)).astype(np.float32)
        lo, kvo = dec.run(None, {"tokens": tokens, "past": past, **audio_feed(cross_o)})
        cache = np.zeros((n_past + k, *row), np.float32)
        cache[:n_past] = past
        logits = np.empty((1, k, dims["n_vocab"]), np.float32)
        decoder.run(tokens, cache, n_past, k, logits)
        diffs["logits"] = max(diffs["logits"], float(np.abs(logits - lo).max()))
        diffs["new_kv"] = max(diffs["new_kv"], float(np.abs(cache[n_past:] - kvo).max()))
    return diffs


def convert_mnn(model_dir: str | Path, tol: float = 5e-2) -> Path:
    """Add MNN graphs to an installed (ONNX) model folder; fp32 weights, int8 weights for the drafter's decoder.

    Needs MNN and onnxruntime, not torch. Raises if MNN disagrees with ONNX Runtime by more than ``tol``
    (absolute, over cross K/V, logits and new K/V); the measured differences go into model.json.
    """
    from ..mnn_backend import import_mnn, mnn_version

    started = time.perf_counter()
    model_dir = Path(model_dir).expanduser()
    meta_path = model_dir / "model.json"
    missing = [f for f in ("model.json", ENCODER_FILE, DECODER_FILE) if not (model_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{model_dir} lacks {', '.join(missing)}: install the ONNX model first "
                                f"(`as2d models install {model_dir.name}`)")
    import_mnn()
    meta = json.loads(meta_path.read_text())
    files = mnn_files(model_dir)
    try:
        _mnnconvert(model_dir / ENCODER_FILE, model_dir / MNN_ENCODER_FILE)
        with tempfile.TemporaryDirectory(prefix="as2d-mnn-decoder-") as scratch:
            decoder = widened(model_dir / DECODER_FILE, Path(scratch))  # MNN cannot load an fp16 initializer
            _mnnconvert(decoder, model_dir / MNN_DECODER_FILE)
            if MNN_DECODER_INT8_FILE in files:
                # The drafter's precision never touches the output: MNN's own 8-bit weight quantization.
                _mnnconvert(decoder, model_dir / MNN_DECODER_INT8_FILE, ("--weightQuantBits", "8"))
        diffs = _validate_mnn(model_dir, meta["dims"])
        worst = max(diffs.values())
        if worst > tol:
            raise RuntimeError(f"MNN graphs in {model_dir} disagree with ONNX Runtime: {diffs} (tolerance {tol})")
    except BaseException:
        for name in files:  # none left behind: an installer takes a folder with its MNN files for converted
            (model_dir / name).unlink(missing_ok=True)
        raise
    meta["mnn"] = {"files": files, "mnn_version": mnn_version(), "weights": "fp32" + (
        "; decoder.int8.mnn: 8-bit weights" if MNN_DECODER_INT8_FILE in files else ""),
        "validation_max_abs_diff_vs_onnxruntime": diffs}
    tmp = meta_path.with_name("model.json.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(meta_path)
    print(f"[as2d-whisper] {meta['name']}: MNN graphs {', '.join(files)} written in "
          f"{time.perf_counter() - started:.1f} s; max |MNN - ONNX Runtime| {diffs}")
    return model_dir
