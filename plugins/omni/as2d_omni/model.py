"""Qwen2.5-Omni thinker as as2d target and drafter on MNN's LLM engine.

Both sizes share one tokenizer (identity bridge). The prompt follows the model's
chat template: its default system prompt, then a user turn holding the audio
(``<|audio_bos|><|AUDIO|>...<|audio_eos|>``, produced by MNN from an ``<audio>``
tag) followed by the instruction, then the assistant turn.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from as2d_core.contracts import Request
from as2d_mnn.lm import LMDraftJob, LMTargetSession
from as2d_mnn.llm import MnnLlm

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


def prompt_text(request: Request, target_language: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{{audio}}"
            f"{instruction(request, target_language)}<|im_end|>\n<|im_start|>assistant\n")


class _Omni:
    vocabulary = "qwen2.5-omni"

    def __init__(self, folder: str | Path, device: str = "cpu", threads: int = 1, max_new_tokens: int = 512,
                 target_language: str = "zh", name: str | None = None):
        self.engine = MnnLlm.load(folder, device, threads, audio=True)
        self.name = name or Path(folder).name
        self.max_new_tokens = max_new_tokens
        self.target_language = target_language
        self.eos_token = self.engine.encode("<|im_end|>")[-1]

    @property
    def device_in_use(self) -> str:
        return self.engine.device_in_use

    def _start(self, request: Request, threads: int):
        ids = self.engine.prompt_ids(prompt_text(request, self.target_language), request.audio)
        return self.engine.start(ids, threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return _SPECIAL.sub("", self.engine.decode(t for t in tokens if t != self.eos_token))

    def encode_text(self, text: str) -> list[int]:
        return self.engine.encode(text)


class OmniTarget(_Omni):
    """The verifying target (Qwen2.5-Omni-7B in the paper)."""

    def prepare(self, request: Request, threads: int) -> LMTargetSession:
        state, logits = self._start(request, threads)
        return LMTargetSession(state, logits, language=request.language or "auto", eos_token=self.eos_token,
                               max_new_tokens=self.max_new_tokens, decode=self.decode_text, encode=self.encode_text)


class OmniSource(_Omni):
    """The drafter (Qwen2.5-Omni-3B): reads the same audio and instruction, never the target's text."""

    languages = None

    def prepare(self, request: Request, language: str, threads: int) -> LMDraftJob:
        state, logits = self._start(request, threads)
        return LMDraftJob(state, logits, eos_token=self.eos_token, max_new_tokens=self.max_new_tokens)
