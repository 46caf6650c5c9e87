"""The ``LMState`` of a transformers model on torch, shared by the Qwen plugins (Qwen3-ASR, Qwen2.5-Omni).

Both thinkers use 3-D rotary positions (mRoPE). After the prompt every new
text token sits at ``cache position + rope_delta`` on all three axes, where the
delta is a property of the request's prompt. It is kept here, per request, and
passed explicitly with ``position_ids``/``cache_position`` on every append:
the model object's own ``rope_deltas`` attribute is shared by every session on
that model and is never read. The KV cache is a transformers ``DynamicCache``;
``crop`` is the cache repair after a rejection.

Importing this module imports neither torch nor transformers.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def weight_files(folder: Path) -> tuple[str, ...]:
    """The safetensors files a checkpoint folder must hold: the index and every shard it names, or one file."""
    index = Path(folder) / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return ("model.safetensors.index.json", *shards)
    return ("model.safetensors",)


class TorchLMState:
    """One request's KV cache in a transformers causal LM (the as2d_lm.lm.LMState protocol)."""

    def __init__(self, model, threads: int = 1):
        import torch
        from transformers import DynamicCache

        self.torch = torch
        self.model = model
        self.cache = DynamicCache()
        self.length = 0
        self.rope_delta = 0
        self.use_threads(threads)

    def prefill(self, inputs: dict, rope_delta: int = 0) -> np.ndarray:
        """Run the prompt (``inputs`` as the model's forward takes them); logits of every prompt position."""
        logits = self._forward(inputs)
        self.length = int(inputs["input_ids"].shape[1])
        self.rope_delta = int(rope_delta)
        return logits

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        torch = self.torch
        k, p = len(tokens), self.length
        if not k:
            raise ValueError("append needs at least one token")
        start = p + self.rope_delta
        positions = torch.arange(start, start + k).view(1, 1, k).expand(3, 1, k)
        logits = self._forward(dict(input_ids=torch.tensor([[int(t) for t in tokens]]), position_ids=positions,
                                    cache_position=torch.arange(p, p + k)))
        self.length = p + k
        return logits

    def _forward(self, inputs: dict) -> np.ndarray:
        with self.torch.inference_mode():
            out = self.model(**inputs, past_key_values=self.cache, use_cache=True)
        return out.logits[0].double().numpy()

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot cut {self.length} cached positions to {length}")
        self.cache.crop(length)
        self.length = length

    def use_threads(self, threads: int) -> None:
        self.torch.set_num_threads(max(1, int(threads)))  # process-wide in torch

    def close(self) -> None:
        self.cache = None
