"""Qwen2.5-Omni thinker as as2d target and drafter, on MNN's LLM engine or on torch.

Both sizes share one tokenizer (identity bridge). The prompt follows the model's
chat template: its default system prompt, then a user turn holding the audio
(``<|audio_bos|><|AUDIO|>...<|audio_eos|>``) followed by the instruction, then
the assistant turn. MNN gets that text written out (its engine expands an
``<audio>`` tag); torch renders the same ``messages`` with the checkpoint's own
chat template (``as2d_omni.thinker``), so both backends see the same prompt.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from as2d_core.contracts import Request
from as2d_lm.lm import LMSource, LMTarget

SYSTEM = ("You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of perceiving "
          "auditory and visual inputs, as well as generating text and speech.")
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese", "de": "German", "fr": "French", "es": "Spanish", "ja": "Japanese",
                  "ko": "Korean", "ru": "Russian", "it": "Italian", "pt": "Portuguese", "ar": "Arabic"}
_SPECIAL = re.compile(r"<\|[^|>]*\|>")


def instruction(request: Request, target_language: str) -> str:
    """The user instruction after the audio: given, or the task's default (QA needs the question)."""
    if request.instruction:
        return request.instruction
    if request.task == "asr":
        name = LANGUAGE_NAMES.get(request.language or "", "")
        return f"Transcribe the {name + ' ' if name else ''}audio into text."
    if request.task == "translate":
        source = LANGUAGE_NAMES.get(request.language or "", "")
        return f"Translate the {source + ' ' if source else ''}speech into {LANGUAGE_NAMES.get(target_language, target_language)}."
    raise ValueError("task 'qa' needs the question as the request instruction")


def messages(request: Request, target_language: str) -> list[dict]:
    """The chat for the checkpoint's template: system prompt, then the audio and the instruction in one user turn."""
    return [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
            {"role": "user", "content": [{"type": "audio", "audio": "request"},
                                         {"type": "text", "text": instruction(request, target_language)}]}]


def prompt_text(request: Request, target_language: str) -> str:
    """``messages`` through the chat template, written out for MNN; ``{audio}`` marks the audio."""
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{{audio}}"
            f"{instruction(request, target_language)}<|im_end|>\n<|im_start|>assistant\n")


class _Omni:
    vocabulary = "qwen2.5-omni"

    def __init__(self, folder: str | Path, backend: str = "mnn", device: str = "cpu", threads: int = 1,
                 max_new_tokens: int = 512, target_language: str = "zh", name: str | None = None,
                 dtype: str = "float32"):
        if backend == "mnn":
            from as2d_mnn.llm import MnnLlm

            self.engine = MnnLlm.load(folder, device, threads, audio=True)
        elif backend == "torch":
            from .thinker import HFThinker

            self.engine = HFThinker(folder, device, dtype)
        else:
            raise ValueError(f"unknown backend {backend!r} for Qwen2.5-Omni; choose 'mnn' or 'torch'")
        self.backend = backend
        self.name = name or Path(folder).name
        self.max_new_tokens = max_new_tokens
        self.target_language = target_language
        self.eos_token = self.engine.encode("<|im_end|>")[-1]

    @property
    def device_in_use(self) -> list[str]:
        return self.engine.device_in_use

    def _start(self, request: Request, threads: int):
        if self.backend == "torch":
            return self.engine.start(messages(request, self.target_language), request.audio, threads)
        ids = self.engine.prompt_ids(prompt_text(request, self.target_language), request.audio)
        return self.engine.start(ids, threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return _SPECIAL.sub("", self.engine.decode(t for t in tokens if t != self.eos_token))

    def encode_text(self, text: str) -> list[int]:
        return self.engine.encode(text)


class OmniTarget(LMTarget, _Omni):
    """The verifying target (Qwen2.5-Omni-7B in the paper)."""


class OmniSource(LMSource, _Omni):
    """The drafter (Qwen2.5-Omni-3B): reads the same audio and instruction, never the target's text."""
