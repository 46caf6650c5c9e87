"""Build tiny random-weight Qwen3-ASR checkpoints in the official folder layout (qwen-asr / transformers 4.57).

Usage (seconds; needs qwen-asr 0.0.6, transformers 4.57.6):

    python tests/build_tiny_qwen3_asr.py [OUT_DIR]      # default: tests/fixtures

Writes ``tiny-qwen3-asr-1.7b/`` (target) and ``tiny-qwen3-asr-0.6b/`` (drafter: the
target with a little weight noise, sharing its tokenizer). There is no MNN export:
llmexport 0.0.5 has no qwen3_asr mapping and MNN 3.6.1 cannot run its audio encoder.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_tiny_qwen_tokenizer import build as build_tokenizer  # noqa: E402
from build_tiny_qwen_weights import copy_with_noise, init_weights  # noqa: E402

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
           "<asr_text>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EXTRA = {"extra_special_tokens": {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                                  "audio_eos_token": "<|audio_end|>"}}
HIDDEN = 64
DRAFTER_NOISE = 0.015


def build(out: Path, seed: int, noise_from=None):
    import torch
    from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration, Qwen3ASRProcessor
    from transformers import AutoTokenizer, WhisperFeatureExtractor

    ids = build_tokenizer(out, SPECIAL, CHAT_TEMPLATE, EXTRA)
    vocab = AutoTokenizer.from_pretrained(out).__len__()
    config = Qwen3ASRConfig(thinker_config={
        "audio_config": {"num_mel_bins": 128, "encoder_layers": 1, "encoder_attention_heads": 2,
                         "encoder_ffn_dim": 64, "d_model": 32, "output_dim": HIDDEN, "downsample_hidden_size": 16,
                         "n_window": 50, "n_window_infer": 800},  # avoids qwen-asr's chunk-mask mismatch at 1.5 s
        "text_config": {"vocab_size": vocab, "hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                        "rope_scaling": {"mrope_section": [2, 3, 3], "interleaved": True, "rope_type": "default"}},
        "audio_token_id": ids["<|audio_pad|>"], "audio_start_token_id": ids["<|audio_start|>"],
    })
    torch.manual_seed(seed)
    model = Qwen3ASRForConditionalGeneration(config).float().eval()
    with torch.no_grad():
        init_weights(model, model.thinker)
        if noise_from is not None:
            copy_with_noise(model, noise_from, seed, DRAFTER_NOISE)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out, safe_serialization=True)
    processor = Qwen3ASRProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128),
                                  tokenizer=AutoTokenizer.from_pretrained(out), chat_template=CHAT_TEMPLATE)
    processor.save_pretrained(out)
    return model


def main(out_dir: Path) -> None:
    target = build(out_dir / "tiny-qwen3-asr-1.7b", seed=17)
    build(out_dir / "tiny-qwen3-asr-0.6b", seed=6, noise_from=target)
    print(f"wrote {out_dir}/tiny-qwen3-asr-1.7b, tiny-qwen3-asr-0.6b")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures")
