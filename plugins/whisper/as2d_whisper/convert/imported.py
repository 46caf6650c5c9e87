"""``as2d models install --from PATH [--name NAME]``: a Whisper the user brings, as an as2d model folder.

The checkpoint (``formats``) becomes the same graphs a packaged model gets (``onnx_export``): the encoder, the
decoder and its windows graph (a target's), an int8 decoder (a drafter's) and the aligner word timestamps
read (``aligner``), so the folder serves either role. model.json records where it came from; installing the same unchanged checkpoint again reuses the folder.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np

from .aligner import checked_aligner
from .formats import Checkpoint, detect, read_checkpoint
from .onnx_export import export_graphs, graph_files, model_meta, write_meta
from .tokenizers import vocabulary_label
from .weights import FORMAT_VERSION, special_tokens

IMPORTED = "imported_from"  # model.json's record of an imported folder: path, format, fingerprint
PACKAGED = ("whisper-base", "whisper-base-int8", "whisper-tiny.en", "whisper-tiny.en-ct2")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def default_name(path: Path) -> str:
    """A model name from the checkpoint's file or folder name: ``faster-whisper-small`` and ``small.pt`` both
    give ``whisper-small``. A Hugging Face cache's snapshot (``models--Systran--faster-whisper-small/snapshots/
    COMMIT``, as faster-whisper downloads) is named by its repository, not its commit."""
    stem = path.stem if path.is_file() else path.name
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        stem = path.parent.parent.name.split("--")[-1]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.").removeprefix("faster-").removeprefix("openai-")
    return stem if "whisper" in stem.lower() else f"whisper-{stem}"


def fingerprint(path: Path) -> list:
    """What says the checkpoint is unchanged: each of its files' name, size and modification time."""
    files = [path] if path.is_file() else sorted(f for f in path.iterdir() if f.is_file())
    return [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def imported_meta(folder: Path) -> dict | None:
    """The model.json of a folder ``import_model`` made (None for any other folder)."""
    try:
        meta = json.loads((folder / "model.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and IMPORTED in meta else None


def _languages(tokenizer: dict) -> list[int]:
    """A multilingual vocabulary's language tokens: those between <|startoftranscript|> and <|translate|>."""
    ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    return list(range(ids["<|startoftranscript|>"] + 1, ids["<|translate|>"]))


def alignment_heads(checkpoint: Checkpoint) -> list[tuple[int, int]]:
    """The decoder heads word timestamps read: the checkpoint's own list (CTranslate2's config.json, Hugging Face's
    generation_config.json), else openai-whisper's default for a model without one, every head of the decoder's
    second half."""
    layers, heads = checkpoint.dims["decoder_layers"], checkpoint.dims["decoder_heads"]
    listed = [(int(layer), int(head)) for layer, head in checkpoint.config.get("alignment_heads") or ()]
    if listed and all(layer < layers and head < heads for layer, head in listed):
        return listed
    return [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]


def import_model(path: str | Path, models_dir: str | Path, name: str | None = None, force: bool = False) -> Path:
    """Convert the Whisper at ``path`` into ``models_dir/NAME`` (``default_name`` without ``name``)."""
    path = Path(path).expanduser().resolve()
    kind = detect(path)
    if name is None:  # a checkpoint named like a packaged model (whisper-base.pt) must not take its name
        name = default_name(path) + ("-imported" if default_name(path) in PACKAGED else "")
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a model name: use letters, digits, '.', '_' and '-'")
    if name in PACKAGED:
        raise ValueError(f"{name!r} is one of as2d's packaged models; give the import another --name")
    out = Path(models_dir).expanduser() / name
    source = {"path": str(path), "format": kind, "fingerprint": fingerprint(path)}
    meta = imported_meta(out)
    if (out / "model.json").is_file() and meta is None and not force:
        raise ValueError(f"{out} holds a model as2d did not import; give another --name (or --force to replace it)")
    if meta is not None and not force:
        if meta[IMPORTED]["path"] != source["path"]:
            raise ValueError(f"{name!r} was imported from {meta[IMPORTED]['path']}; give another --name "
                             "(or --force to replace it)")
        if meta[IMPORTED] == source and meta.get("format_version") == FORMAT_VERSION:
            return out  # the same checkpoint, unchanged: already converted
    started = time.perf_counter()
    checkpoint = read_checkpoint(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model.json").unlink(missing_ok=True)  # the folder is incomplete until model.json is back
    state = checkpoint.state
    tied = np.array_equal(state["proj_out.weight"], state["model.decoder.embed_tokens.weight"])
    alignment = {}
    outputs, diff = export_graphs(state, checkpoint.dims, out, tied_output=tied, windows=True, int8_decoder=True,
                                  label=name, on_model=lambda model: alignment.update(checked_aligner(
                                      model, checkpoint.dims, alignment_heads(checkpoint), out, name)))
    meta = folder_meta(checkpoint, name, out)
    meta.update({"files": [*outputs, "tokenizer.json", *graph_files(out, [alignment["file"]])], IMPORTED: source,
                 "validation_max_abs_diff": diff, "alignment": alignment})
    write_meta(out, meta)
    print(f"[as2d-whisper] {name}: {kind} checkpoint {path} converted into {out} in "
          f"{time.perf_counter() - started:.1f} s")
    return out


def folder_meta(checkpoint: Checkpoint, name: str, out: Path) -> dict:
    """The checkpoint's tokenizer.json written into ``out``, and the model.json it and the sizes make (its graph
    files aside): special tokens, languages, suppression lists, vocabulary name."""
    (out / "tokenizer.json").write_text(json.dumps(checkpoint.tokenizer, ensure_ascii=False), encoding="utf-8")
    dims = checkpoint.dims
    multilingual = dims["n_vocab"] >= 51865
    config = dict(checkpoint.config)
    if multilingual and not config.get("lang_ids"):
        config["lang_ids"] = _languages(checkpoint.tokenizer)
    return model_meta(name, vocabulary_label(checkpoint.tokenizer, dims["n_vocab"]), multilingual, dims, [],
                      special_tokens(out / "tokenizer.json", config, multilingual))
