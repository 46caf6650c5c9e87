"""The ONNX folder of a packaged model: the torch module exported as an encoder and a decoder graph, checked
against torch, with the tokenizer and model.json beside them."""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ..graph_io import BEAMS_FILE, OWN, PROMPT, WINDOWS_FILE, audio_feed, audio_input_names, kv_feed, kv_input_names
from .torch_model import build_torch_model
from .weights import FORMAT_VERSION, load_ct2_weights, source_files, special_tokens

log = logging.getLogger(__name__)

ENCODER_FILE, DECODER_FILE, DECODER_INT8_FILE = "encoder.onnx", "decoder.onnx", "decoder.int8.onnx"


@contextlib.contextmanager
def graph_file(out_dir: Path, name: str):
    """Where torch writes graph ``name``: a scratch folder of its own, then the graph is moved into ``out_dir``
    (``place_graph``).

    A graph over protobuf's 2 GB limit (large-v3's encoder and decoder) keeps its weights outside it, and torch
    writes them one file per tensor, named after the tensor: two graphs of one folder could overwrite each
    other's, so each graph gets a scratch folder of its own.
    """
    scratch = out_dir / f".{name}.export"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    try:
        yield scratch / name
        place_graph(scratch / name, out_dir / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def place_graph(exported: Path, target: Path) -> None:
    """Write an exported graph (its weights inside it or in files beside it) to ``target`` as ``save_graph`` does."""
    import onnx

    save_graph(onnx.load(str(exported)), target)


def save_graph(model, target: Path) -> None:
    """Write ONNX graph ``model`` to ``target`` with its weights in one file beside it, ``target.data``.

    ONNX Runtime maps that file into memory rather than copying every weight out of the protobuf: a session of
    whisper-base's decoder builds in 0.2 s instead of 0.5-0.8 s (BENCHMARKS.md section 30), with the same bits.
    Each session still packs its own copy of the weights its matrix products read.
    """
    import onnx

    data = target.with_name(target.name + ".data")
    data.unlink(missing_ok=True)
    onnx.save_model(model, str(target), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name)
    if data.exists():  # onnx writes none where every weight is under its 1 KB threshold (a tiny graph)
        data.chmod(target.stat().st_mode & 0o777)  # onnx creates it private; a model folder is read like its graphs


def widened(graph: Path, scratch: Path) -> Path:
    """``graph``, or where it has fp16 weights (a token lookup's copy, ``torch_model``'s ``narrow_lookup``) a copy
    in ``scratch`` with them widened to fp32, the same numbers: for the tools that cannot take fp16 weights (MNN's
    converter, ONNX Runtime's dynamic quantizer)."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_model

    model = onnx.load(str(graph), load_external_data=False)  # the weights read only where there is one to widen
    narrow = [i for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT16]
    if not narrow:
        return graph
    load_external_data_for_model(model, str(graph.parent))
    for initializer in narrow:
        initializer.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(initializer).astype(np.float32),
                                                     initializer.name))
    copy = scratch / graph.name
    save_graph(model, copy)
    return copy


def graph_files(out_dir: Path, graphs: list[str]) -> list[str]:
    """``graphs`` and the weight files beside them (``save_graph``): the files a folder's model.json lists."""
    return graphs + [f"{g}.data" for g in graphs if (out_dir / f"{g}.data").is_file()]


def listing_graphs(listed: list[str], out_dir: Path, graphs: list[str]) -> list[str]:
    """A model.json's ``files`` (``listed``) with ``graphs`` written later into the folder, and their weight files,
    added where not listed yet (a second conversion lists each file once)."""
    return [*listed, *(f for f in graph_files(out_dir, graphs) if f not in listed)]


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

        def forward(self, tokens, past, *audio):  # audio: cross_k0, cross_v0, cross_k1, ... (``graph_io``)
            return self.m.decode(tokens, past, list(zip(audio[::2], audio[1::2])))

    hd = dims["d_model"] // dims["decoder_heads"]
    mel = torch.zeros(1, dims["n_mels"], 2 * dims["n_audio_ctx"])
    with torch.no_grad():
        cross = model.cross_kv(mel)
        with graph_file(out_dir, ENCODER_FILE) as path:
            torch.onnx.export(EncoderGraph(model), (mel,), str(path), input_names=["mel"],
                              output_names=["cross_kv"], opset_version=opset, dynamo=False)
        tokens = torch.zeros(1, 3, dtype=torch.int64)
        past = torch.zeros(5, dims["decoder_layers"], 2, dims["decoder_heads"], hd)
        audio = tuple(cross.reshape(-1, *cross.shape[2:]).unbind(0))
        with graph_file(out_dir, DECODER_FILE) as path:
            torch.onnx.export(DecoderGraph(model), (tokens, past, *audio), str(path),
                              input_names=["tokens", "past", *audio_input_names(dims["decoder_layers"])],
                              output_names=["logits", "new_kv"],
                              dynamic_axes={"tokens": {1: "K"}, "past": {0: "P"}, "logits": {1: "K"},
                                            "new_kv": {0: "K"}},
                              opset_version=opset, dynamo=False)


def _export_windows(model, dims: dict, out_dir: Path, opset: int = 17) -> None:
    """The decoder over B windows in one call: tokens [B, K], a position-major cache [P, B, L, 2, H, hd], each
    window's cached ``lengths`` [B], then each layer's audio K and V as [B, H, frames, hd]."""
    import torch

    class WindowsGraph(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens, cache, lengths, *audio):
            return self.m.decode_windows(tokens, cache, lengths, list(zip(audio[::2], audio[1::2])))

    layers, heads = dims["decoder_layers"], dims["decoder_heads"]
    hd = dims["d_model"] // heads
    names = audio_input_names(layers)
    audio = tuple(torch.zeros(2, heads, dims["n_audio_ctx"], hd) for _ in names)
    with torch.no_grad():
        example = (torch.zeros(2, 3, dtype=torch.int64), torch.zeros(5, 2, layers, 2, heads, hd), torch.tensor([5, 3]))
        with graph_file(out_dir, WINDOWS_FILE) as path:
            torch.onnx.export(WindowsGraph(model), (*example, *audio), str(path),
                              input_names=["tokens", "cache", "lengths", *names], output_names=["logits", "new_kv"],
                              dynamic_axes={"tokens": {0: "B", 1: "K"}, "cache": {0: "P", 1: "B"},
                                            "lengths": {0: "B"}, "logits": {0: "B", 1: "K"}, "new_kv": {0: "B", 1: "K"},
                                            **{name: {0: "B"} for name in names}},
                              opset_version=opset, dynamo=False)


def _export_beams(model, dims: dict, out_dir: Path, opset: int = 17) -> None:
    """Beam search's graph (``torch_model.decode_beams``): tokens [B, K], each row's response ``lengths`` [B], then
    per layer and kind the rows' own response K/V [R, B, H, hd], the shared prompt's [1, H, S, hd] and the audio's
    [1, H, frames, hd] (``graph_io``)."""
    import torch

    layers, heads = dims["decoder_layers"], dims["decoder_heads"]
    hd = dims["d_model"] // heads

    class BeamsGraph(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens, lengths, *blocks):  # own, prompt, audio: 2 * layers each
            own, prompt, audio = (list(zip(part[::2], part[1::2])) for part in
                                  (blocks[:2 * layers], blocks[2 * layers:4 * layers], blocks[4 * layers:]))
            return self.m.decode_beams(tokens, own, lengths, prompt, audio)

    names = {OWN: kv_input_names(layers, OWN), PROMPT: kv_input_names(layers, PROMPT),
             "audio": audio_input_names(layers)}
    blocks = (*(torch.zeros(4, 2, heads, hd) for _ in names[OWN]),
              *(torch.zeros(1, heads, 6, hd) for _ in names[PROMPT]),
              *(torch.zeros(1, heads, dims["n_audio_ctx"], hd) for _ in names["audio"]))
    with torch.no_grad(), graph_file(out_dir, BEAMS_FILE) as path:
        torch.onnx.export(BeamsGraph(model), (torch.zeros(2, 3, dtype=torch.int64), torch.tensor([4, 2]), *blocks),
                          str(path), input_names=["tokens", "lengths", *names[OWN], *names[PROMPT], *names["audio"]],
                          output_names=["logits", "new_kv"],
                          dynamic_axes={"tokens": {0: "B", 1: "K"}, "lengths": {0: "B"}, "logits": {0: "B", 1: "K"},
                                        "new_kv": {0: "B", 1: "K"}, **{n: {0: "R", 1: "B"} for n in names[OWN]},
                                        **{n: {2: "S"} for n in names[PROMPT]}},
                          opset_version=opset, dynamo=False)


def _validate_beams(out_dir: Path, dims: dict, tol: float) -> float:
    """The beams graph against the single-window decoder: rows of different response lengths after one shared
    prompt, one and several tokens a row, and a first step, where no row has a response yet (one masked position
    stands in for the empty block, as the runtime feeds it)."""
    import onnxruntime as ort

    rng = np.random.default_rng(2)
    layers, heads = dims["decoder_layers"], dims["decoder_heads"]
    row = (layers, 2, heads, dims["d_model"] // heads)
    cross = rng.normal(size=(layers, 2, heads, dims["n_audio_ctx"], row[-1])).astype(np.float32)
    providers = ["CPUExecutionProvider"]
    single = ort.InferenceSession(str(out_dir / DECODER_FILE), providers=providers)
    beams = ort.InferenceSession(str(out_dir / BEAMS_FILE), providers=providers)
    prompt = rng.normal(size=(5, *row)).astype(np.float32)
    shared = kv_feed(np.ascontiguousarray(prompt.transpose(1, 2, 3, 0, 4))[:, :, None], PROMPT)
    audio = {name: block[None] for name, block in audio_feed(cross).items()}
    worst = 0.0
    for lengths, k in (([4, 0, 2], 1), ([4, 0, 2], 3), ([0, 0], 2)):
        lengths = np.array(lengths, np.int64)
        own = rng.normal(size=(max(1, int(lengths.max())), len(lengths), *row)).astype(np.float32)
        tokens = rng.integers(0, dims["n_vocab"], size=(len(lengths), k)).astype(np.int64)
        logits, new_kv = beams.run(None, {"tokens": tokens, "lengths": lengths, **shared, **audio,
                                          **kv_feed(np.ascontiguousarray(own.transpose(2, 3, 0, 1, 4, 5)), OWN)})
        for b, n in enumerate(lengths):
            past = np.concatenate([prompt, own[:n, b]])
            lo, kvo = single.run(None, {"tokens": tokens[b:b + 1], "past": past, **audio_feed(cross)})
            worst = max(worst, scaled_diff(lo[0], logits[b]), scaled_diff(kvo, new_kv[b]))
    if worst > tol:
        raise RuntimeError(f"{BEAMS_FILE} disagrees with {DECODER_FILE}: max scaled |diff| {worst:.3g} > {tol}")
    return worst


def scaled_diff(reference: np.ndarray, other: np.ndarray) -> float:
    """How far ``other`` is from ``reference``: the largest difference, relative to the largest value where that
    is over 1 (a large model's logits and K/V are larger, and so are float32's differences in them)."""
    return float(np.abs(reference - other).max()) / max(1.0, float(np.abs(reference).max()))


def _validate_windows(out_dir: Path, dims: dict, tol: float) -> float:
    """The windows graph against the single-window decoder, in one call each: three windows of different cache
    lengths, each with its own audio; then three rows on one window's audio, as beam search calls it."""
    import onnxruntime as ort

    rng = np.random.default_rng(1)
    layers, heads = dims["decoder_layers"], dims["decoder_heads"]
    row = (layers, 2, heads, dims["d_model"] // heads)
    lengths, k = np.array([7, 0, 3], np.int64), 4
    cross = rng.normal(size=(3, layers, 2, heads, dims["n_audio_ctx"], row[-1])).astype(np.float32)
    cache = rng.normal(size=(int(lengths.max()), 3, *row)).astype(np.float32)
    tokens = rng.integers(0, dims["n_vocab"], size=(3, k)).astype(np.int64)
    providers = ["CPUExecutionProvider"]
    single = ort.InferenceSession(str(out_dir / DECODER_FILE), providers=providers)
    windows = ort.InferenceSession(str(out_dir / WINDOWS_FILE), providers=providers)
    worst = 0.0
    for audios in (cross, cross[:1]):  # a window each; one window for every row
        audio = {name: np.ascontiguousarray(audios[:, i // 2, i % 2])
                 for i, name in enumerate(audio_input_names(layers))}
        logits, new_kv = windows.run(None, {"tokens": tokens, "cache": cache, "lengths": lengths, **audio})
        for b, n in enumerate(lengths):
            lo, kvo = single.run(None, {"tokens": tokens[b:b + 1], "past": cache[:n, b],
                                        **audio_feed(audios[b % len(audios)])})
            worst = max(worst, scaled_diff(lo[0], logits[b]), scaled_diff(kvo, new_kv[b]))
    if worst > tol:
        raise RuntimeError(f"{WINDOWS_FILE} disagrees with {DECODER_FILE}: max scaled |diff| {worst:.3g} > {tol}")
    return worst


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
        worst = scaled_diff(cross_t.numpy(), cross_o)
        hd = dims["d_model"] // dims["decoder_heads"]
        for n_past, k in ((0, 4), (7, 1), (7, 5)):
            tokens = rng.integers(0, dims["n_vocab"], size=(1, k)).astype(np.int64)
            past = rng.normal(size=(n_past, dims["decoder_layers"], 2, dims["decoder_heads"], hd)).astype(np.float32)
            lt, kvt = model.decode(torch.from_numpy(tokens), torch.from_numpy(past), cross_t)
            lo, kvo = dec.run(None, {"tokens": tokens, "past": past, **audio_feed(cross_o)})
            worst = max(worst, scaled_diff(lt.numpy(), lo), scaled_diff(kvt.numpy(), kvo))
    if worst > tol:
        raise RuntimeError(f"ONNX export of {decoder_file} disagrees with torch: max scaled |diff| {worst:.3g} > {tol}")
    return worst


def export_graphs(state: dict, dims: dict, out_dir: Path, *, tied_output: bool, windows: bool,
                  int8_decoder: bool, label: str, on_model=None) -> tuple[list[str], float]:
    """The graphs of one model from its weights (Hugging Face names): the encoder, the decoder, a target's windows
    graph, a drafter's int8 decoder; each checked (ONNX Runtime against torch, windows against single). Returns
    the files written and the largest difference the checks saw. ``on_model(model)`` may export more from the
    torch module before it is dropped (model.json is not written yet)."""
    model = build_torch_model(state, dims, tied_output=tied_output)
    _export(model, dims, out_dir)
    diff = _validate(model, dims, out_dir, DECODER_FILE, tol=2e-3)
    log.info("%s: ONNX Runtime matches torch (max scaled |diff| %.2e over cross K/V, logits, new_kv)", label, diff)
    print(f"[as2d-whisper] {label}: ONNX Runtime matches torch, max scaled |diff| {diff:.2e}")
    outputs = [ENCODER_FILE, DECODER_FILE]
    if windows:  # a target: its windows graph too (the drafter decodes one window at a time)
        _export_windows(model, dims, out_dir)
        windows_diff = _validate_windows(out_dir, dims, tol=1e-3)
        print(f"[as2d-whisper] {label}: {WINDOWS_FILE} matches {DECODER_FILE}, max scaled |diff| {windows_diff:.2e}")
        outputs.append(WINDOWS_FILE)
        _export_beams(model, dims, out_dir)
        beams_diff = _validate_beams(out_dir, dims, tol=1e-3)
        print(f"[as2d-whisper] {label}: {BEAMS_FILE} matches {DECODER_FILE}, max scaled |diff| {beams_diff:.2e}")
        outputs.append(BEAMS_FILE)
    if int8_decoder:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantized = out_dir / f".{DECODER_INT8_FILE}.tmp"
        with tempfile.TemporaryDirectory(prefix="as2d-int8-decoder-") as scratch:
            quantize_dynamic(str(widened(out_dir / DECODER_FILE, Path(scratch))), str(quantized),
                             weight_type=QuantType.QInt8)
        place_graph(quantized, out_dir / DECODER_INT8_FILE)
        quantized.unlink()
        outputs.append(DECODER_INT8_FILE)
    if on_model is not None:
        on_model(model)
    return graph_files(out_dir, outputs), diff


def model_meta(name: str, vocabulary: str, multilingual: bool, dims: dict, files: list[str], special: dict) -> dict:
    """model.json's common fields: what the runtime reads of a converted folder."""
    return {
        "format_version": FORMAT_VERSION,
        "name": name,
        "vocabulary": vocabulary,
        "multilingual": multilingual,
        "dims": dims,
        "files": files,
        "cache_layout": "past/new_kv: [positions, decoder_layers, 2 (k, v), heads, head_dim]",
        "cross_kv_layout": "[decoder_layers, 2 (k, v), heads, n_audio_ctx, head_dim]",
        "decoder_audio_inputs": "cross_k{layer}, cross_v{layer}: [heads, n_audio_ctx, head_dim], blocks of cross_kv",
        "max_length": dims["n_text_ctx"],
        **special,
    }


def write_meta(out_dir: Path, meta: dict) -> None:
    """model.json, written last: a folder with model.json is complete."""
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")


def convert_onnx(name: str, out_dir: str | Path) -> Path:
    """Convert one packaged model into ``out_dir`` (ONNX graphs, tokenizer, model.json)."""
    started = time.perf_counter()
    files = source_files(name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = json.loads(files["config"].read_text())
    state, dims = load_ct2_weights(files["weights"])
    multilingual = dims["n_vocab"] >= 51865
    drafter = name == "whisper-tiny.en"
    outputs, diff = export_graphs(state, dims, out_dir, tied_output=not drafter, windows=not drafter,
                                  int8_decoder=drafter, label=name)
    shutil.copyfile(files["tokenizer"], out_dir / "tokenizer.json")
    meta = model_meta(name, files["vocabulary"], multilingual, dims, outputs + ["tokenizer.json"],
                      special_tokens(files["tokenizer"], config, multilingual))
    meta.update(source_packages=files["packages"], validation_max_abs_diff=diff)
    write_meta(out_dir, meta)
    print(f"[as2d-whisper] {name}: converted into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir
