"""Qwen3-ASR as as2d target (1.7B) and drafter (0.6B) on torch, through the qwen-asr package.

The prompt is the model's own: the processor's chat template over a system turn
(context, empty by default) and a user turn holding the audio, then the assistant
turn; with a language hint qwen-asr appends ``language X<asr_text>`` so the
response is the text alone. The thinker's KV cache is a transformers
DynamicCache (``as2d_lm.torch_lm``, shared with the Omni plugin): ``crop``
is the cache repair. Both sizes share the tokenizer.

On MNN this model needs an MNN build newer than 3.6.1 (its audio encoder fails
on 3.6.1), which ``as2d_mnn.llm.qwen3_asr_audio_reason`` detects.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.contracts import Request
from as2d_core.setup.paths import check_folder
from as2d_lm.lm import LMSource, LMTarget
from as2d_lm.torch_lm import TorchLMState, weight_files

PROCESSOR_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "preprocessor_config.json")
TORCH_LAYOUT = "the Hugging Face checkpoint folder of Qwen/Qwen3-ASR-1.7B or -0.6B (qwen-asr / transformers 4.57 layout)"
# ISO codes of the languages Qwen3-ASR names in its prompt (qwen_asr.inference.utils.SUPPORTED_LANGUAGES).
LANGUAGES = {"zh": "Chinese", "en": "English", "yue": "Cantonese", "ar": "Arabic", "de": "German", "fr": "French",
             "es": "Spanish", "pt": "Portuguese", "id": "Indonesian", "it": "Italian", "ko": "Korean", "ru": "Russian",
             "th": "Thai", "vi": "Vietnamese", "ja": "Japanese", "tr": "Turkish", "hi": "Hindi", "ms": "Malay",
             "nl": "Dutch", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "pl": "Polish", "cs": "Czech",
             "fil": "Filipino", "fa": "Persian", "el": "Greek", "hu": "Hungarian", "mk": "Macedonian",
             "ro": "Romanian"}


def required_files(folder: Path) -> tuple[str, ...]:
    """What loading reads; the weights as ``weight_files`` lists them, so every shard of an index is checked too."""
    return ("config.json", *weight_files(folder), *PROCESSOR_FILES)


class _Qwen3ASR:
    vocabulary = "qwen3-asr"

    def __init__(self, folder: str | Path, backend: str = "torch", device: str = "cpu", max_new_tokens: int = 512,
                 dtype: str = "float32", context: str = "", name: str | None = None):
        folder = Path(folder).expanduser()
        if backend == "mnn":
            from as2d_mnn.llm import qwen3_asr_audio_reason

            why = qwen3_asr_audio_reason()
            raise RuntimeError(why or "the MNN path of Qwen3-ASR is not implemented in this plugin yet; use backend 'torch'")
        if backend != "torch":
            raise ValueError(f"unknown backend {backend!r} for Qwen3-ASR; choose 'torch' or 'mnn'")
        if device != "cpu":
            raise RuntimeError(f"device {device!r}: this plugin runs Qwen3-ASR on torch CPU only")
        check_folder(folder, required_files(folder), TORCH_LAYOUT)
        import torch
        import qwen_asr  # noqa: F401  (registers qwen3_asr with transformers' Auto classes)
        from transformers import AutoModel, AutoProcessor

        self.torch = torch
        self.model = AutoModel.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
        self.thinker = self.model.thinker
        self.processor = AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)
        self.tokenizer = self.processor.tokenizer
        self.name = name or folder.name
        self.max_new_tokens = max_new_tokens
        self.context = context
        self.eos_token = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.asr_text = self.tokenizer.convert_tokens_to_ids("<asr_text>")
        self.device_in_use = ["torch:CPU"]

    def prompt(self, language: str | None) -> str:
        messages = [{"role": "system", "content": self.context},
                    {"role": "user", "content": [{"type": "audio", "audio": ""}]}]
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if language:
            if language not in LANGUAGES:
                raise ValueError(f"Qwen3-ASR has no language {language!r}; known: {', '.join(sorted(LANGUAGES))}")
            text += f"language {LANGUAGES[language]}<asr_text>"
        return text

    def _start(self, request: Request, threads: int):
        if request.task != "asr":
            raise ValueError(f"Qwen3-ASR serves the task 'asr' only, not {request.task!r}")
        inputs = self.processor(text=[self.prompt(request.language)], audio=[np.asarray(request.audio)],
                                return_tensors="pt", padding=True)
        inputs["input_features"] = inputs["input_features"].to(self.model.dtype)
        state = TorchLMState(self.thinker, threads)
        return state, state.prefill(dict(inputs))  # Qwen3-ASR numbers every position in order: delta 0

    def decode_text(self, tokens: Sequence[int]) -> str:
        """Text after ``<asr_text>`` (an unhinted response starts with ``language X<asr_text>``)."""
        tokens = [int(t) for t in tokens if int(t) != self.eos_token]
        if self.asr_text in tokens:
            tokens = tokens[len(tokens) - tokens[::-1].index(self.asr_text):]
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


class Qwen3ASRTarget(LMTarget, _Qwen3ASR):
    """The verifying target (Qwen3-ASR-1.7B)."""


class Qwen3ASRSource(LMSource, _Qwen3ASR):
    """The audio-conditioned drafter (Qwen3-ASR-0.6B), same tokenizer as the target."""
