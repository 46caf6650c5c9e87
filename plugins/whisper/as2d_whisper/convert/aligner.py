"""Export the aligner graph that word timestamps need: the decoder over a whole token sequence at once,
returning its logits and the raw cross-attention scores of the model's alignment heads.

Word timestamps (openai-whisper's method, which faster-whisper runs through CTranslate2's ``align``)
read the cross-attention of a few decoder heads that follow the audio closely. The runtime decoder
(``decoder.onnx``) returns only logits and new K/V, so a second graph is exported from the same torch
module at install time: ``aligner.onnx``, inputs ``tokens`` [1, T] and ``cross_kv`` (the encoder
graph's output, so the request's encoder pass is reused), outputs ``logits`` [1, T, vocab] and
``attention`` [alignment heads, T, audio frames] (scaled q.k, before the softmax: the aligner takes the
softmax over the frames that hold audio only). The heads go into model.json (``alignment``).

The graph runs ``build_torch_model``'s own decoder step with an empty cache, so its logits are the
runtime decoder's; only the recording of the scores is added. An int8 folder gets the same graph with
the int8 decoder's quantization (``quantize_aligner``), so its probabilities are its own decoder's.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ..alignment import ALIGNER_FILE
from ..graph_io import audio_feed
from .onnx_export import DECODER_FILE, graph_file, listing_graphs, scaled_diff
from .quantize import quantize_decoder
from .torch_model import build_torch_model
from .weights import load_ct2_weights, package_version, source_files

# openai-whisper's alignment heads (layer, head) per model, as CTranslate2 folders list them: the
# packaged config.json carries them; this table serves a package that lacks the field.
ALIGNMENT_HEADS = {
    "whisper-base": ((3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)),
    "whisper-tiny.en": ((1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)),
}


def alignment_heads(name: str, config: dict) -> list[tuple[int, int]]:
    """The (layer, head) pairs of ``name``: the package config's ``alignment_heads``, else the table."""
    heads = config.get("alignment_heads") or ALIGNMENT_HEADS.get(name)
    if not heads:
        raise ValueError(f"no alignment heads known for {name!r}: its config.json lists none "
                         f"and as2d knows them for {', '.join(ALIGNMENT_HEADS)}")
    return [(int(layer), int(head)) for layer, head in heads]


def _aligner_module(model, heads: list[tuple[int, int]], dims: dict):
    """The model's decoder step on an empty cache, also returning the alignment heads' scores."""
    import torch

    layers = model.model.decoder.layers
    hd = dims["d_model"] // dims["decoder_heads"]
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    class AlignerGraph(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, tokens, cross_kv):
            recorded: dict[int, torch.Tensor] = {}
            for index in by_layer:  # each cross-attention with heads to keep records its scores, then attends
                attention = layers[index].encoder_attn

                def attend(q, k, v, mask=None, _index=index, _attend=attention.attend):
                    recorded[_index] = torch.matmul(q, k.transpose(1, 2)) * (1.0 / math.sqrt(hd))
                    return _attend(q, k, v, mask)

                attention.attend = attend
            try:
                past = torch.zeros(0, dims["decoder_layers"], 2, dims["decoder_heads"], hd)
                logits, _ = self.m.decode(tokens, past, cross_kv)
            finally:
                for index in by_layer:
                    del layers[index].encoder_attn.attend
            scores = torch.cat([recorded[layer][by_layer[layer]] for layer in sorted(by_layer)])
            return logits, scores

    order = [(layer, head) for layer in sorted(by_layer) for head in by_layer[layer]]
    return AlignerGraph(), order


def export_aligner(model, dims: dict, heads: list[tuple[int, int]], out_dir: Path, opset: int = 17):
    """Write ``aligner.onnx``; returns the heads in the order of its ``attention`` rows."""
    import torch

    graph, order = _aligner_module(model, heads, dims)
    hd = dims["d_model"] // dims["decoder_heads"]
    tokens = torch.zeros(1, 5, dtype=torch.int64)
    cross = torch.zeros(dims["decoder_layers"], 2, dims["decoder_heads"], dims["n_audio_ctx"], hd)
    with torch.no_grad(), graph_file(out_dir, ALIGNER_FILE) as path:
        torch.onnx.export(graph, (tokens, cross), str(path), input_names=["tokens", "cross_kv"],
                          output_names=["logits", "attention"],
                          dynamic_axes={"tokens": {1: "T"}, "logits": {1: "T"}, "attention": {1: "T"}},
                          opset_version=opset, dynamo=False)
    return order


def _random_inputs(dims: dict) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    hd = dims["d_model"] // dims["decoder_heads"]
    cross = rng.normal(size=(dims["decoder_layers"], 2, dims["decoder_heads"], dims["n_audio_ctx"], hd))
    return rng.integers(0, dims["n_vocab"], size=(1, 9)).astype(np.int64), cross.astype(np.float32)


def _against_decoder(out_dir: Path, dims: dict, tol: float) -> tuple[float, np.ndarray]:
    """Max |diff| of the aligner's logits against the folder's runtime decoder on an empty cache, and its scores."""
    import onnxruntime as ort

    tokens, cross = _random_inputs(dims)
    providers = ["CPUExecutionProvider"]
    logits, scores = ort.InferenceSession(str(out_dir / ALIGNER_FILE), providers=providers).run(
        None, {"tokens": tokens, "cross_kv": cross})
    past = np.zeros((0, *cross.shape[:3], cross.shape[-1]), np.float32)
    decoder = ort.InferenceSession(str(out_dir / DECODER_FILE), providers=providers)
    expected = decoder.run(["logits"], {"tokens": tokens, "past": past, **audio_feed(cross)})[0]
    worst = scaled_diff(expected, logits)
    if worst > tol:
        raise RuntimeError(f"{out_dir / ALIGNER_FILE} disagrees with {DECODER_FILE}: max scaled |diff| {worst:.3g} > {tol}")
    return worst, scores


def _validate_aligner(model, dims: dict, order: list[tuple[int, int]], out_dir: Path, tol: float) -> float:
    """Max |diff| of the aligner against the runtime decoder graph (logits) and against torch (scores)."""
    import torch

    worst, scores = _against_decoder(out_dir, dims, tol)
    tokens, cross = _random_inputs(dims)
    with torch.no_grad():
        _, expected = _aligner_module(model, order, dims)[0](torch.from_numpy(tokens), torch.from_numpy(cross))
    worst = max(worst, scaled_diff(expected.numpy(), scores))
    if worst > tol:
        raise RuntimeError(f"{ALIGNER_FILE}'s attention scores disagree with torch: max scaled |diff| {worst:.3g} > {tol}")
    return worst


def _write_meta(out_dir: Path, alignment: dict) -> None:
    meta_path = out_dir / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["alignment"] = alignment
    meta["files"] = listing_graphs(meta.get("files", []), out_dir, [ALIGNER_FILE])
    tmp = meta_path.with_name("model.json.tmp")
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(meta_path)


def convert_aligner(name: str, out_dir: str | Path) -> Path:
    """Add ``aligner.onnx`` and its heads to an installed (converted) fp32 folder of ``name``; needs torch."""
    started = time.perf_counter()
    out_dir = Path(out_dir).expanduser()
    if not (out_dir / "model.json").is_file() or not (out_dir / DECODER_FILE).is_file():
        raise FileNotFoundError(f"{out_dir} holds no converted model: run `as2d models install {name}`")
    files = source_files(name)
    heads = alignment_heads(name, json.loads(files["config"].read_text()))
    state, dims = load_ct2_weights(files["weights"])
    model = build_torch_model(state, dims, tied_output=name != "whisper-tiny.en")  # as ``convert_onnx`` builds it
    _write_meta(out_dir, checked_aligner(model, dims, heads, out_dir, name))
    print(f"[as2d-whisper] {name}: {ALIGNER_FILE} written in {time.perf_counter() - started:.1f} s")
    return out_dir


def checked_aligner(model, dims: dict, heads: list[tuple[int, int]], out_dir: Path, label: str) -> dict:
    """Export the torch ``model``'s aligner into a converted folder and check it; returns model.json's
    ``alignment`` record (the heads in the order of the graph's rows)."""
    order = export_aligner(model, dims, heads, out_dir)
    diff = _validate_aligner(model, dims, order, out_dir, tol=2e-3)
    print(f"[as2d-whisper] {label}: {ALIGNER_FILE} (alignment heads {order}); max |diff| against the decoder "
          f"{diff:.2e}")
    return {"file": ALIGNER_FILE, "heads": [list(h) for h in order], "validation_max_abs_diff": diff}


def quantize_aligner(fp32_dir: str | Path, out_dir: str | Path) -> Path:
    """The int8 folder's aligner: the fp32 one quantized as ``quantize_target`` quantizes the decoder
    (the output projection per token, its activations per row, the token lookup untied), so its probabilities
    are that decoder's."""
    import onnx

    fp32_dir, out_dir = Path(fp32_dir).expanduser(), Path(out_dir).expanduser()
    meta = json.loads((fp32_dir / "model.json").read_text())
    if "alignment" not in meta or not (fp32_dir / ALIGNER_FILE).is_file():
        raise FileNotFoundError(f"{fp32_dir} lacks {ALIGNER_FILE}: run `as2d models install {fp32_dir.name}`")
    nodes = quantize_decoder(onnx.load(str(fp32_dir / ALIGNER_FILE)), meta["dims"]["n_vocab"], out_dir / ALIGNER_FILE)
    diff, _ = _against_decoder(out_dir, meta["dims"], tol=1e-3)
    _write_meta(out_dir, {**meta["alignment"], "validation_max_abs_diff": diff,
                          "int8": {"from": fp32_dir.name, "nodes": nodes,
                                   "onnxruntime_version": package_version("onnxruntime")}})
    print(f"[as2d-whisper] {out_dir.name}: int8 {ALIGNER_FILE} written; max |diff| against its decoder {diff:.2e}")
    return out_dir
