"""Build a tiny random-weight Parakeet CTC folder in the real onnx-asr layout (for tests).

model.onnx takes ``audio_signal`` float [B, 80, T] and ``length`` int64 [B] and
returns ``logprobs`` [B, T', V+1] after 8x subsampling, like a NeMo CTC export;
vocab.txt lists sentencepiece-style pieces as ``token id`` with ``<blk>`` last;
config.json gives features_size and subsampling_factor. Weights are seeded, so
the folder is the same on every run.

    python tests/build_tiny_parakeet.py OUT_DIR
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

WORDS = "the a of and to in is was he it that for on with as his at by had not be this but from or".split()
PIECES = ["<unk>", *(f"\u2581{w}" for w in WORDS), *"\u2581abcdefghijklmnopqrstuvwxyz", "s", "ed", "ing", "'"]


class TinyCtc(torch.nn.Module):
    """Three stride-2 convolutions (8x subsampling) and a CTC head; frames past ``length`` are zeroed."""

    def __init__(self, n_mels: int, vocab: int, hidden: int = 48):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv1d(n_mels if i == 0 else hidden, hidden, 3, stride=2, padding=1) for i in range(3)
        )
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, audio_signal, length):
        mask = (torch.arange(audio_signal.shape[-1])[None, :] < length[:, None]).to(audio_signal.dtype)
        x = audio_signal * mask[:, None, :]
        for conv in self.convs:
            x = torch.relu(conv(x))
        return torch.log_softmax(self.head(x.transpose(1, 2)), dim=-1)


def build(out_dir: str | Path, n_mels: int = 80, seed: int = 0) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    vocab = [*PIECES, "<blk>"]
    model = TinyCtc(n_mels, len(vocab)).eval()
    with torch.no_grad():
        model.head.bias[-1] = -1.0  # fewer blank frames, so random weights still emit tokens
    example = (torch.randn(1, n_mels, 256), torch.tensor([256], dtype=torch.int64))
    torch.onnx.export(
        model, example, str(out / "model.onnx"), input_names=["audio_signal", "length"], output_names=["logprobs"],
        dynamic_axes={"audio_signal": {0: "B", 2: "T"}, "length": {0: "B"}, "logprobs": {0: "B", 1: "T_out"}},
        opset_version=17, dynamo=False,
    )
    (out / "vocab.txt").write_text("".join(f"{p} {i}\n" for i, p in enumerate(vocab)), encoding="utf-8")
    config = {"model_type": "nemo-conformer-ctc", "features_size": n_mels, "subsampling_factor": 8}
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "tiny-parakeet-ctc"))
