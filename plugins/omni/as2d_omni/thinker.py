"""Qwen2.5-Omni's thinker from its Hugging Face checkpoint, on torch (the omni plugin's ``torch`` backend).

``Qwen2_5OmniThinkerForConditionalGeneration`` loads straight from the full
checkpoint folder: the thinker's weights sit under ``thinker.``, which the class
strips, and the talker and token2wav weights are skipped, so neither their
memory nor ``spk_dict.pt`` is needed. A weight the checkpoint lacks would be
left random by transformers: loading fails instead.

Inputs are made as ``Qwen2_5OmniProcessor`` makes them: its chat template
(``chat_template.json``), its Whisper feature extractor with the same arguments,
and ``<|AUDIO|>`` repeated once per audio-encoder output frame. The processor
object itself is not built: transformers 4.57 builds its video processor with
it, and that needs torchvision, which as2d (sending no video) does not install.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.setup.paths import check_folder
from as2d_lm.torch_lm import TorchLMState, weight_files

PROCESSOR_FILES = ("tokenizer.json", "tokenizer_config.json", "preprocessor_config.json")
LAYOUT = "the Hugging Face checkpoint folder of Qwen/Qwen2.5-Omni-7B or -3B as published (transformers 4.57 layout)"
AUDIO = "<|AUDIO|>"
SAMPLE_RATE = 16_000


def required_files(folder: Path) -> tuple[str, ...]:
    """What loading reads: config, weights (one file, or the index and its shards), tokenizer, features, template."""
    template = "chat_template.jinja" if (folder / "chat_template.jinja").is_file() else "chat_template.json"
    return ("config.json", *weight_files(folder), *PROCESSOR_FILES, template)


class HFThinker:
    """One loaded thinker; any number of requests may use it at once (each holds its own cache and rope delta)."""

    device_in_use = ["torch:CPU"]

    def __init__(self, folder: str | Path, device: str = "cpu", dtype: str = "float32"):
        folder = Path(folder).expanduser()
        if device != "cpu":
            raise RuntimeError(f"device {device!r}: this plugin runs Qwen2.5-Omni on torch CPU only")
        check_folder(folder, required_files(folder), LAYOUT)
        import torch
        from transformers import (AutoTokenizer, Qwen2_5OmniProcessor, Qwen2_5OmniThinkerForConditionalGeneration,
                                  WhisperFeatureExtractor)

        self.torch = torch
        model, info = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
            folder, dtype=getattr(torch, dtype), output_loading_info=True)
        unloaded = info["missing_keys"] + [str(m) for m in info["mismatched_keys"]]
        if unloaded:
            raise RuntimeError(f"{folder} is not a complete Qwen2.5-Omni checkpoint: these thinker weights would "
                               f"be random: {', '.join(sorted(unloaded)[:8])}{' ...' if len(unloaded) > 8 else ''}")
        self.model = model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.features = WhisperFeatureExtractor.from_pretrained(folder)
        self.chat_template = Qwen2_5OmniProcessor.get_processor_dict(folder)[0].get("chat_template")
        if isinstance(self.chat_template, dict):
            self.chat_template = self.chat_template["default"]

    def prompt(self, messages: list[dict]) -> str:
        """The chat template's text, with one ``<|AUDIO|>`` where the audio goes and the assistant turn opened."""
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template,
                                                  add_generation_prompt=True, tokenize=False)

    def inputs(self, text: str, audio: np.ndarray) -> dict:
        """Forward inputs of ``text`` (one ``<|AUDIO|>``) and 16 kHz ``audio``, as the processor makes them."""
        features = self.features(np.asarray(audio, np.float32), sampling_rate=SAMPLE_RATE, padding="max_length",
                                 return_attention_mask=True, return_tensors="pt")
        mask = features["attention_mask"]
        _, frames = self.model.audio_tower._get_feat_extract_output_lengths(mask.sum(-1))
        ids = self.tokenizer(text.replace(AUDIO, AUDIO * int(frames[0]), 1), return_tensors="pt")
        return dict(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"],
                    input_features=features["input_features"].to(self.model.dtype), feature_attention_mask=mask)

    def start(self, messages: list[dict], audio: np.ndarray, threads: int) -> tuple[TorchLMState, np.ndarray]:
        """Prefill the prompt with explicit mRoPE positions; the state keeps this request's rope delta."""
        torch = self.torch
        inputs = self.inputs(self.prompt(messages), audio)
        positions, delta = self.model.get_rope_index(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                                     audio_seqlens=inputs["feature_attention_mask"].sum(-1))
        length = inputs["input_ids"].shape[1]
        state = TorchLMState(self.model, threads)
        logits = state.prefill(dict(inputs, position_ids=positions, cache_position=torch.arange(length)),
                               rope_delta=int(delta.reshape(-1)[0]))
        return state, logits

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``; special tokens are kept (callers drop them), as on MNN."""
        return self.tokenizer.decode([int(t) for t in tokens], skip_special_tokens=False)
