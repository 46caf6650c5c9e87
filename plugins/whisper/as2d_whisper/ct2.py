"""Read CTranslate2 ``model.bin`` files (layout version 6) without CTranslate2.

The Whisper weights we can get offline ship in CTranslate2's format, but the
runtime we deploy is ONNX Runtime, so we parse the file ourselves and rename
the variables into the usual Whisper parameter names.
"""
from __future__ import annotations

import io
import re
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

SUPPORTED_VERSION = 6
_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_BF16 = 5


def _u8(f: BinaryIO) -> int:
    return struct.unpack("<B", f.read(1))[0]


def _u16(f: BinaryIO) -> int:
    return struct.unpack("<H", f.read(2))[0]


def _u32(f: BinaryIO) -> int:
    return struct.unpack("<I", f.read(4))[0]


def _string(f: BinaryIO) -> str:
    n = _u16(f)
    return f.read(n).rstrip(b"\0").decode("utf-8")


def read_model_bin(source: str | Path | bytes | BinaryIO) -> tuple[str, dict[str, np.ndarray]]:
    """Return ``(model_name, variables)``; floats become float32, aliases are resolved.

    ``source`` may be a path, the file's bytes, or an open binary stream (so the
    two halves of a split package can be read without writing a joined file).
    """
    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            return read_model_bin(f)
    f = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    version = _u32(f)
    if version != SUPPORTED_VERSION:
        raise ValueError(f"unsupported CTranslate2 model.bin version {version} (expected {SUPPORTED_VERSION})")
    model_name = _string(f)
    _revision = _u32(f)
    variables: dict[str, np.ndarray] = {}
    for _ in range(_u32(f)):
        name = _string(f)
        ndim = _u8(f)
        shape = tuple(_u32(f) for _ in range(ndim))
        dtype = _u8(f)
        nbytes = _u32(f)
        raw = f.read(nbytes)
        if len(raw) != nbytes:
            raise ValueError(f"model.bin is truncated inside variable {name!r}")
        if dtype == _BF16:
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dtype in _DTYPES:
            arr = np.frombuffer(raw, dtype=_DTYPES[dtype])
        else:
            raise ValueError(f"unknown dtype code {dtype} for variable {name!r}")
        arr = arr.reshape(shape)
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32)
        variables[name] = arr
    n_aliases = _u32(f)
    for _ in range(n_aliases):
        alias = _string(f)
        target = _string(f)
        variables[alias] = variables[target]
    return model_name, variables


def _scalar(variables: dict[str, np.ndarray], name: str) -> int:
    return int(np.asarray(variables[name]).reshape(-1)[0])


def _layer_count(variables: dict[str, np.ndarray], side: str) -> int:
    pattern = re.compile(rf"^{side}/layer_(\d+)/")
    return 1 + max(int(m.group(1)) for k in variables if (m := pattern.match(k)))


def whisper_dims(variables: dict[str, np.ndarray]) -> dict[str, int]:
    """Model sizes read off the tensors, so no external config is trusted."""
    n_enc, n_dec = (_layer_count(variables, side) for side in ("encoder", "decoder"))
    conv1 = variables["encoder/conv1/weight"]
    return {
        "n_mels": int(conv1.shape[1]),
        "d_model": int(conv1.shape[0]),
        "n_audio_ctx": int(variables["encoder/position_encodings/encodings"].shape[0]),
        "n_text_ctx": int(variables["decoder/position_encodings/encodings"].shape[0]),
        "n_vocab": int(variables["decoder/embeddings/weight"].shape[0]),
        "encoder_layers": n_enc,
        "decoder_layers": n_dec,
        "encoder_heads": _scalar(variables, "encoder/num_heads"),
        "decoder_heads": _scalar(variables, "decoder/num_heads"),
    }


def _norm(out: dict, dst: str, v: dict, src: str) -> None:
    out[f"{dst}.weight"] = v[f"{src}/gamma"]
    out[f"{dst}.bias"] = v[f"{src}/beta"]


def _linear(out: dict, dst: str, v: dict, src: str) -> None:
    out[f"{dst}.weight"] = v[f"{src}/weight"]
    if f"{src}/bias" in v:
        out[f"{dst}.bias"] = v[f"{src}/bias"]


def _split_linear(out: dict, dsts: list[str], v: dict, src: str) -> None:
    """Split a fused projection (q,k,v or k,v) row-wise into its parts."""
    w = np.split(v[f"{src}/weight"], len(dsts), axis=0)
    b = np.split(v[f"{src}/bias"], len(dsts), axis=0) if f"{src}/bias" in v else [None] * len(dsts)
    for dst, wi, bi in zip(dsts, w, b):
        out[f"{dst}.weight"] = wi
        out[f"{dst}.bias"] = bi if bi is not None else np.zeros(wi.shape[0], np.float32)


def _self_attention_and_ffn(out: dict, dst: str, v: dict, src: str) -> None:
    """The parts encoder and decoder layers share: fused self-attention q,k,v, its output and norm, and the FFN."""
    _split_linear(out, [f"{dst}.self_attn.{p}_proj" for p in "qkv"], v, f"{src}/self_attention/linear_0")
    _linear(out, f"{dst}.self_attn.out_proj", v, f"{src}/self_attention/linear_1")
    _norm(out, f"{dst}.self_attn_layer_norm", v, f"{src}/self_attention/layer_norm")
    _linear(out, f"{dst}.fc1", v, f"{src}/ffn/linear_0")
    _linear(out, f"{dst}.fc2", v, f"{src}/ffn/linear_1")
    _norm(out, f"{dst}.final_layer_norm", v, f"{src}/ffn/layer_norm")


def to_whisper_state(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Rename CTranslate2 variables into Hugging Face style Whisper names.

    Missing k biases (CTranslate2 fuses q,k,v with a zero k bias) stay zero.
    """
    dims = whisper_dims(variables)
    v, out = variables, {}
    for i in (1, 2):
        _linear(out, f"model.encoder.conv{i}", v, f"encoder/conv{i}")
    out["model.encoder.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    _norm(out, "model.encoder.layer_norm", v, "encoder/layer_norm")
    for i in range(dims["encoder_layers"]):
        s, d = f"encoder/layer_{i}", f"model.encoder.layers.{i}"
        _self_attention_and_ffn(out, d, v, s)
    out["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    out["model.decoder.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    _norm(out, "model.decoder.layer_norm", v, "decoder/layer_norm")
    for i in range(dims["decoder_layers"]):
        s, d = f"decoder/layer_{i}", f"model.decoder.layers.{i}"
        _self_attention_and_ffn(out, d, v, s)
        _linear(out, f"{d}.encoder_attn.q_proj", v, f"{s}/attention/linear_0")
        _split_linear(out, [f"{d}.encoder_attn.k_proj", f"{d}.encoder_attn.v_proj"], v, f"{s}/attention/linear_1")
        _linear(out, f"{d}.encoder_attn.out_proj", v, f"{s}/attention/linear_2")
        _norm(out, f"{d}.encoder_attn_layer_norm", v, f"{s}/attention/layer_norm")
    out["proj_out.weight"] = v.get("decoder/projection/weight", v["decoder/embeddings/weight"])
    return out
