"""as2d plugin hooks for Parakeet CTC (entry point ``parakeet``); the runtime is imported lazily."""
from __future__ import annotations

from pathlib import Path

import click

from as2d_core.decode.chunked import DEFAULT_CHUNK_S
from as2d_core.setup.hookspecs import hookimpl

INSTALL = "pip install ./plugins/parakeet"
MODEL_DIR = "parakeet-ctc"


def _folder(options: dict) -> Path:
    return Path(options["model_dir"]) if options.get("model_dir") else Path(options["models_dir"]) / MODEL_DIR


def _source(options: dict):
    from .source import ParakeetSource

    folder = _folder(options)
    nemo = options.get("nemo")
    if nemo and not (folder / "model.onnx").is_file():
        from .export import export_nemo

        export_nemo(nemo, folder)
    return ParakeetSource(folder, device=options.get("device") or "auto",
                          chunk_s=float(options.get("chunk_s", DEFAULT_CHUNK_S)), pad_last=bool(options.get("pad_last", False)))


@hookimpl
def register_sources(register):
    from .source import LAYOUT, REQUIRED_FILES, ParakeetSource

    register(
        "parakeet-ctc",
        _source,
        description="Parakeet CTC (FastConformer), English, chunked: publishes each finished 2.56 s chunk",
        tasks=("asr",),
        languages=tuple(sorted(ParakeetSource.languages)),
        vocabulary="parakeet-ctc",
        backends=("onnxruntime",),
        model_dir=MODEL_DIR,
        required_files=REQUIRED_FILES,
        layout=LAYOUT,
        install=INSTALL,
    )


@hookimpl
def register_commands(cli):
    @cli.group("parakeet")
    def parakeet():
        """Parakeet CTC drafter tools."""

    @parakeet.command("export")
    @click.argument("checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path))
    @click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Folder to write (default: MODELS_DIR/parakeet-ctc).")
    def export(checkpoint, out_dir):
        """Export a NeMo .nemo CTC CHECKPOINT to the ONNX folder the drafter reads."""
        from as2d_core.setup.paths import models_dir

        from .export import export_nemo

        click.echo(f"wrote {export_nemo(checkpoint, out_dir or models_dir() / MODEL_DIR)}")
