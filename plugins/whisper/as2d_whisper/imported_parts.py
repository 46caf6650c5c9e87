"""The Whisper checkpoints a user brings (``as2d models install --from``): the importer part, and each folder it
made in the models folder registered by name as a target and a drafter. Light: listing parts imports neither
torch nor ONNX Runtime."""
from __future__ import annotations

import importlib.util
from pathlib import Path

IMPORTER = "whisper-checkpoint"  # the model part that converts a Whisper the user brings (``--from``)
ACCEPTED = ("a faster-whisper/CTranslate2 folder (model.bin, config.json, tokenizer.json or vocabulary.*), "
            "a Hugging Face WhisperForConditionalGeneration folder (config.json, model.safetensors or "
            "pytorch_model.bin, tokenizer.json), or an openai-whisper checkpoint (.pt with dims and model_state_dict)")
# a converted folder: the graphs, each with its weights beside it (``convert.onnx_export.save_graph``)
REQUIRED_FILES = ("encoder.onnx", "encoder.onnx.data", "decoder.onnx", "decoder.onnx.data", "tokenizer.json",
                  "model.json")


def imported_models() -> dict[str, dict]:
    """The folders ``as2d models install --from`` made in the models folder: name -> its model.json."""
    from as2d_core.setup.paths import models_dir

    from .convert.imported import imported_meta

    root = models_dir()
    metas = {folder.name: imported_meta(folder) for folder in sorted(root.iterdir()) if folder.is_dir()} \
        if root.is_dir() else {}
    return {name: meta for name, meta in metas.items() if meta is not None and meta.get("name") == name}


def imported_info(name: str, meta: dict) -> dict:
    """What listings and configuration checks read of an imported folder, for either role."""
    dims, origin = meta["dims"], meta["imported_from"]
    kind = "multilingual" if meta["multilingual"] else "English-only"
    return dict(
        description=f"Whisper imported from {origin['path']} ({origin['format']}; {kind}, {dims['n_mels']} mels, "
                    f"{dims['encoder_layers']}+{dims['decoder_layers']} layers of {dims['d_model']}) on ONNX Runtime",
        vocabulary=meta["vocabulary"], backends=("onnxruntime",), model_dir=name, required_files=REQUIRED_FILES,
        layout="a Whisper folder converted by `as2d models install --from`: encoder.onnx, decoder.onnx, "
               "decoder.windows.onnx, decoder.int8.onnx, aligner.onnx, tokenizer.json, model.json",
        model_install=f"as2d models install --from {origin['path']} --name {name}",
    )


def roles(meta: dict) -> dict:
    """What an imported model does, as target or drafter: a multilingual one every language and translation."""
    if meta["multilingual"]:
        return {"tasks": ("asr", "translate"), "languages": None}
    return {"tasks": ("asr",), "languages": ("en",)}


def recognizes(path: Path) -> bool:
    """Whether ``path`` is a Whisper checkpoint in a layout the importer reads."""
    from .convert.formats import NotAWhisper, detect

    try:
        detect(Path(path).expanduser())
    except NotAWhisper:
        return False
    return True


def import_checkpoint(models_dir: Path, force: bool = False, source: Path | None = None, name: str | None = None):
    """Convert the Whisper checkpoint at ``source`` into ``models_dir/NAME`` (``convert.imported``)."""
    if source is None:
        raise ValueError(f"{IMPORTER} converts a checkpoint you name: `as2d models install --from PATH [--name NAME]`")
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
        raise RuntimeError("converting a Whisper checkpoint needs torch and onnx: run `pip install "
                           "'as2d-whisper[convert]'` (from this repository: "
                           "`pip install './plugins/whisper[convert]'`)")
    from .convert.imported import import_model

    return import_model(source, models_dir, name=name, force=force)
