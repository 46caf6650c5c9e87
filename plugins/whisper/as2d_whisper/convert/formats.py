"""A Whisper the user brings, read into what ``onnx_export`` converts: the weights under Hugging Face's names,
the sizes, the tokenizer and the generation settings (CTranslate2's ``config.json`` names).

Three layouts: a faster-whisper (CTranslate2) folder, a Hugging Face ``WhisperForConditionalGeneration``
folder, an openai-whisper checkpoint (``.pt``). Any size: the sizes are read off the tensors and the
config, so 128 mel bins (large-v3) and 4 decoder layers (turbo) need nothing of their own.
"""
from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..ct2 import read_model_bin, to_whisper_state, whisper_dims
from ..imported_parts import ACCEPTED
from .tokenizers import read_tokenizer

HF_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")

# openai-whisper's parameter names -> Hugging Face's (regular expressions, applied in order; the first match wins)
OPENAI_NAMES = (
    (r"encoder\.positional_embedding", "model.encoder.embed_positions.weight"),
    (r"decoder\.positional_embedding", "model.decoder.embed_positions.weight"),
    (r"decoder\.token_embedding\.weight", "model.decoder.embed_tokens.weight"),
    (r"encoder\.conv(\d)\.(weight|bias)", r"model.encoder.conv\1.\2"),
    (r"encoder\.ln_post\.(weight|bias)", r"model.encoder.layer_norm.\1"),
    (r"decoder\.ln\.(weight|bias)", r"model.decoder.layer_norm.\1"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.attn\.query\.(weight|bias)", r"model.\1.layers.\2.self_attn.q_proj.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.attn\.key\.(weight|bias)", r"model.\1.layers.\2.self_attn.k_proj.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.attn\.value\.(weight|bias)", r"model.\1.layers.\2.self_attn.v_proj.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.attn\.out\.(weight|bias)", r"model.\1.layers.\2.self_attn.out_proj.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.attn_ln\.(weight|bias)", r"model.\1.layers.\2.self_attn_layer_norm.\3"),
    (r"decoder\.blocks\.(\d+)\.cross_attn\.query\.(weight|bias)", r"model.decoder.layers.\1.encoder_attn.q_proj.\2"),
    (r"decoder\.blocks\.(\d+)\.cross_attn\.key\.(weight|bias)", r"model.decoder.layers.\1.encoder_attn.k_proj.\2"),
    (r"decoder\.blocks\.(\d+)\.cross_attn\.value\.(weight|bias)", r"model.decoder.layers.\1.encoder_attn.v_proj.\2"),
    (r"decoder\.blocks\.(\d+)\.cross_attn\.out\.(weight|bias)", r"model.decoder.layers.\1.encoder_attn.out_proj.\2"),
    (r"decoder\.blocks\.(\d+)\.cross_attn_ln\.(weight|bias)", r"model.decoder.layers.\1.encoder_attn_layer_norm.\2"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.mlp\.0\.(weight|bias)", r"model.\1.layers.\2.fc1.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.mlp\.2\.(weight|bias)", r"model.\1.layers.\2.fc2.\3"),
    (r"(encoder|decoder)\.blocks\.(\d+)\.mlp_ln\.(weight|bias)", r"model.\1.layers.\2.final_layer_norm.\3"),
)


class NotAWhisper(ValueError):
    """A path in none of the layouts as2d imports, or one whose files contradict each other."""


@dataclass
class Checkpoint:
    """One Whisper as read: weights (Hugging Face names, float32), sizes, tokenizer (tokenizer.json's content)
    and generation settings (``lang_ids``, ``suppress_ids``, ``suppress_ids_begin``; absent ones are derived)."""

    format: str
    state: dict[str, np.ndarray]
    dims: dict[str, int]
    tokenizer: dict
    config: dict = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # what the checkpoint was read from (its fingerprint)


def detect(path: Path) -> str:
    """``"ctranslate2"``, ``"huggingface"`` or ``"openai-whisper"``; a NotAWhisper naming the layouts otherwise."""
    if path.is_file() and path.suffix in (".pt", ".pth"):
        return "openai-whisper"
    if path.is_dir() and (path / "model.bin").is_file():
        return "ctranslate2"
    if path.is_dir() and (path / "config.json").is_file() and any((path / f).is_file() for f in HF_WEIGHTS):
        return "huggingface"
    what = "does not exist" if not path.exists() else "is none of the layouts as2d imports"
    raise NotAWhisper(f"{path} {what}; give {ACCEPTED}")


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read any of the three layouts (``detect``)."""
    path = Path(path).expanduser()
    kind = detect(path)
    return {"ctranslate2": _read_ct2, "huggingface": _read_hf, "openai-whisper": _read_openai}[kind](path)


def _dequantized(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2's integer weights (``ct2-transformers-converter --quantization int8``) back to floats: each
    row was multiplied by its ``weight_scale`` and rounded. An alias (the tied output projection) is the same
    array as its target and has no scale of its own: it gets its target's floats."""
    floats: dict[int, np.ndarray] = {}  # id of an integer array -> its floats
    for name, value in variables.items():
        scale = variables.get(name + "_scale") if name.endswith("/weight") else None
        if value.dtype.kind == "i" and scale is not None:
            shape = (-1, *[1] * (value.ndim - 1))
            floats[id(value)] = value.astype(np.float32) / np.asarray(scale, np.float32).reshape(shape)
    return {name: floats.get(id(value), value) for name, value in variables.items()
            if not name.endswith("/weight_scale")}


def _read_ct2(folder: Path) -> Checkpoint:
    try:
        name, variables = read_model_bin(folder / "model.bin")
    except (ValueError, struct.error) as exc:
        raise NotAWhisper(f"{folder / 'model.bin'} is not a CTranslate2 model this reader knows: {exc}") from None
    if name != "WhisperSpec":
        raise NotAWhisper(f"{folder / 'model.bin'} holds a CTranslate2 {name}, not a Whisper (WhisperSpec)")
    variables = _dequantized(variables)
    dims = whisper_dims(variables)
    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").is_file() else {}
    tokenizer = read_tokenizer(folder, dims["n_vocab"])
    return Checkpoint("ctranslate2", to_whisper_state(variables), dims, tokenizer, config, [folder / "model.bin"])


def _hf_tensors(folder: Path) -> tuple[dict[str, np.ndarray], list[Path]]:
    """Every tensor of a Hugging Face folder (one file or shards), as float32 numpy arrays."""
    import torch

    index = next((folder / f for f in ("model.safetensors.index.json", "pytorch_model.bin.index.json")
                  if (folder / f).is_file()), None)
    if index is not None:
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = [next(folder / f for f in ("model.safetensors", "pytorch_model.bin") if (folder / f).is_file())]
    tensors = {}
    for file in files:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors.update(load_file(str(file)))
        else:
            tensors.update(torch.load(file, map_location="cpu", weights_only=True))
    return {k: v.float().numpy() for k, v in tensors.items()}, files


def _read_hf(folder: Path) -> Checkpoint:
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "whisper":
        raise NotAWhisper(f"{folder / 'config.json'} describes a {config.get('model_type')!r} model, not a whisper one")
    tensors, files = _hf_tensors(folder)
    # WhisperModel (no head) saves encoder.*/decoder.*; WhisperForConditionalGeneration saves model.*
    state = {(k if k.startswith(("model.", "proj_out.")) else "model." + k): v for k, v in tensors.items()}
    dims = {
        "n_mels": config["num_mel_bins"], "d_model": config["d_model"],
        "n_audio_ctx": config["max_source_positions"], "n_text_ctx": config["max_target_positions"],
        "n_vocab": config["vocab_size"], "encoder_layers": config["encoder_layers"],
        "decoder_layers": config["decoder_layers"], "encoder_heads": config["encoder_attention_heads"],
        "decoder_heads": config["decoder_attention_heads"],
    }
    generation = folder / "generation_config.json"
    settings = {**config, **(json.loads(generation.read_text()) if generation.is_file() else {})}
    ct2_config = {}
    if settings.get("suppress_tokens") is not None:
        ct2_config["suppress_ids"] = settings["suppress_tokens"]
    if settings.get("begin_suppress_tokens") is not None:
        ct2_config["suppress_ids_begin"] = settings["begin_suppress_tokens"]
    if settings.get("lang_to_id"):
        ct2_config["lang_ids"] = sorted(settings["lang_to_id"].values())
    if settings.get("alignment_heads"):
        ct2_config["alignment_heads"] = settings["alignment_heads"]
    return Checkpoint("huggingface", _complete(state, dims), dims, read_tokenizer(folder, dims["n_vocab"]),
                      ct2_config, files)


def _read_openai(path: Path) -> Checkpoint:
    import torch

    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(checkpoint, dict) or not {"dims", "model_state_dict"} <= set(checkpoint):
        raise NotAWhisper(f"{path} is not an openai-whisper checkpoint (a dict with 'dims' and 'model_state_dict')")
    d = checkpoint["dims"]
    dims = {"n_mels": d["n_mels"], "d_model": d["n_audio_state"], "n_audio_ctx": d["n_audio_ctx"],
            "n_text_ctx": d["n_text_ctx"], "n_vocab": d["n_vocab"], "encoder_layers": d["n_audio_layer"],
            "decoder_layers": d["n_text_layer"], "encoder_heads": d["n_audio_head"], "decoder_heads": d["n_text_head"]}
    if d["n_text_state"] != d["n_audio_state"]:
        raise NotAWhisper(f"{path}: encoder width {d['n_audio_state']} and decoder width {d['n_text_state']} differ")
    state = {}
    for name, tensor in checkpoint["model_state_dict"].items():
        for pattern, replacement in OPENAI_NAMES:
            if re.fullmatch(pattern, name):
                state[re.sub(pattern, replacement, name)] = tensor.float().numpy()
                break
        else:
            if name != "alignment_heads":  # word-timestamp heads, not a weight
                raise NotAWhisper(f"{path}: unknown parameter {name!r} in model_state_dict")
    tokenizer = read_tokenizer(path.parent, dims["n_vocab"], beside=path)
    return Checkpoint("openai-whisper", _complete(state, dims), dims, tokenizer, {}, [path])


def _complete(state: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """What the two torch layouts leave out: the key projections' biases (none: zeros) and the tied output."""
    for side, layers in (("encoder", dims["encoder_layers"]), ("decoder", dims["decoder_layers"])):
        for i in range(layers):
            for attention in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                bias = f"model.{side}.layers.{i}.{attention}.k_proj.bias"
                state.setdefault(bias, np.zeros(dims["d_model"], np.float32))
    state.setdefault("proj_out.weight", state["model.decoder.embed_tokens.weight"])
    return state
