"""Does batching Whisper's encoder pay on this machine? (issue 34: "the encoder batches too")

Exports the packaged model's encoder (and every decoder layer's audio K/V, as the installed ``encoder.onnx``
computes them) once more with a batch axis, then times ONNX Runtime on 1, 2 and 4 padded 30 s inputs and checks
that each input's output in a batch equals, bit for bit, its output alone (what exact batching would need).

    .venv/bin/python -m as2d_whisper.convert.batched_encoder --model whisper-base --threads 2 --repeats 5
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def export_batched(name: str, out: Path) -> int:
    """The encoder of ``name`` with a batch axis, written to ``out``; returns its mel bins."""
    import torch
    import torch.nn.functional as F
    from .torch_model import build_torch_model
    from .weights import load_ct2_weights, source_files

    state, dims = load_ct2_weights(source_files(name)["weights"])
    model = build_torch_model(state, dims, tied_output=True)

    class Batched(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.layers = model.model.encoder, model.model.decoder.layers

        def forward(self, mel):  # [B, n_mels, 3000] -> [B, layers, 2, heads, 1500, head_dim]
            encoder = self.encoder
            x = F.gelu(encoder.conv2(F.gelu(encoder.conv1(mel)))).transpose(1, 2) + encoder.embed_positions.weight
            for layer in encoder.layers:
                x = layer(x)
            x = encoder.layer_norm(x)
            kv = [torch.stack([c.split(c.k_proj(x)), c.split(c.v_proj(x))], dim=1)
                  for c in (layer.encoder_attn for layer in self.layers)]
            return torch.stack(kv, dim=1)

    mel = torch.zeros(2, dims["n_mels"], 2 * dims["n_audio_ctx"])
    with torch.no_grad():
        torch.onnx.export(Batched().eval(), (mel,), str(out), input_names=["mel"], output_names=["cross_kv"],
                          dynamic_axes={"mel": {0: "B"}, "cross_kv": {0: "B"}}, opset_version=17, dynamo=False)
    return dims["n_mels"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,2,4")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    batches = [int(b) for b in args.batches.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "encoder.batched.onnx"
        mels = export_batched(args.model, path)
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs = np.random.default_rng(0).standard_normal((max(batches), mels, 3000)).astype(np.float32)
    alone = [session.run(None, {"mel": inputs[i: i + 1]})[0][0] for i in range(max(batches))]
    print(f"{args.model} encoder, {args.threads} threads, median of {args.repeats}")
    print("| batch | seconds a call | seconds an input | vs batch 1 | each input bit for bit as alone |")
    print("|---:|---:|---:|---:|---|")
    per_one = None
    for batch in batches:
        session.run(None, {"mel": inputs[:batch]})  # warm
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            out = session.run(None, {"mel": inputs[:batch]})[0]
            times.append(time.perf_counter() - started)
        call = statistics.median(times)
        per_one = per_one or call
        same = all(np.array_equal(out[i], alone[i]) for i in range(batch))
        print(f"| {batch} | {call:.3f} | {call / batch:.3f} | {per_one / (call / batch):.2f}x | "
              f"{'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
