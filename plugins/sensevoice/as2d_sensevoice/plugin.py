"""as2d plugin hooks for SenseVoice Small (entry point ``sensevoice``); the runtime is imported lazily."""
from __future__ import annotations

from pathlib import Path

from as2d_core.decode.chunked import DEFAULT_CHUNK_S
from as2d_core.setup.hookspecs import hookimpl

INSTALL = "pip install ./plugins/sensevoice"
MODEL_DIR = "sensevoice-small"


def _source(options: dict):
    from .source import SenseVoiceSource

    folder = Path(options["model_dir"]) if options.get("model_dir") else Path(options["models_dir"]) / MODEL_DIR
    if not (folder / "model.onnx").is_file() and (folder / "model.pt").is_file():
        from .export import export_checkpoint  # the PyTorch checkpoint, through the optional funasr extra

        export_checkpoint(folder)
    return SenseVoiceSource(folder, device=options.get("device") or "auto", use_itn=bool(options.get("use_itn", True)),
                            chunk_s=float(options.get("chunk_s", DEFAULT_CHUNK_S)), pad_last=bool(options.get("pad_last", False)))


@hookimpl
def register_sources(register):
    from .source import LANGUAGES, LAYOUT, REQUIRED_FILES

    register(
        "sensevoice-small",
        _source,
        description="SenseVoice Small, non-autoregressive CTC, chunked (language and text-norm controls)",
        tasks=("asr",),
        languages=LANGUAGES,
        vocabulary="sensevoice-bpe",
        backends=("onnxruntime",),
        model_dir=MODEL_DIR,
        required_files=REQUIRED_FILES,
        layout=LAYOUT,
        install=INSTALL,
    )
