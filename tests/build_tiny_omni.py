"""Build tiny random-weight Qwen2.5-Omni models in the real formats (HF checkpoint folder and MNN llmexport folder).

Rebuild the committed fixtures (a minute on 2 cores; needs transformers 4.57, llmexport 0.0.5, MNN 3.6):

    .venv/bin/python tests/build_tiny_omni.py [OUT_DIR]      # default: tests/fixtures

It writes ``tiny-omni-7b-hf/`` (target) and ``tiny-omni-3b-hf/`` (drafter) in the
Hugging Face layout (the torch backend's folders and the logits reference), and
their MNN exports ``tiny-omni-7b/`` and ``tiny-omni-3b/``. The drafter is the
target with noise on its weights, so it shares the tokenizer and agrees with
the target often but not always: as2d then sees both accepted and rejected
candidates.

A random model barely listens to its audio: attention is near uniform, and the
audio encoder's output is mostly its fixed position embedding. Larger audio
convolutions (the sound, not the position, shapes the audio embeddings),
sharper attention and a larger attention output (against the token's own
embedding) make the greedy output change with the audio in most positions.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from build_tiny_qwen_tokenizer import build as build_tokenizer  # noqa: E402
from build_tiny_qwen_weights import copy_with_noise, init_weights  # noqa: E402
from build_tiny_qwen_llmexport import export_mnn  # noqa: E402

SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>",
    "<|IMAGE|>", "<|VIDEO|>", "<|vision_bos|>", "<|vision_eos|>", "<|vision_pad|>",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'audio' or 'audio' in content %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'image' %}<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'video' %}<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HIDDEN, LAYERS, HEADS, KV_HEADS = 64, 2, 4, 2
DRAFTER_NOISE = 0.01  # relative to each weight's std
AUDIO_CONV_SCALE, QK_SCALE, VO_SCALE = 8.0, 2.0, 2.5  # make the output depend on the audio (see above)


def config(ids: dict[str, int], vocab: int):
    from transformers import Qwen2_5OmniConfig

    head_dim = HIDDEN // HEADS
    thinker = {
        "audio_config": {
            "num_mel_bins": 128, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
            "d_model": 32, "output_dim": HIDDEN, "n_window": 100, "max_source_positions": 1500,
        },
        "vision_config": {
            "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": HIDDEN,
            "fullatt_block_indexes": [0],
        },
        "text_config": {
            "vocab_size": vocab, "hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": 4096,
            "rope_theta": 1000000.0,
            "rope_scaling": {"mrope_section": [2, 3, 3], "rope_type": "default", "type": "default"},
            "tie_word_embeddings": False,
        },
        "audio_token_index": ids["<|AUDIO|>"], "audio_start_token_id": ids["<|audio_bos|>"],
        "audio_end_token_id": ids["<|audio_eos|>"], "image_token_index": ids["<|IMAGE|>"],
        "video_token_index": ids["<|VIDEO|>"], "vision_start_token_id": ids["<|vision_bos|>"],
        "vision_end_token_id": ids["<|vision_eos|>"], "vision_token_id": ids["<|vision_pad|>"],
        "bos_token_id": ids["<|im_start|>"], "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
        "user_token_id": ids["<|im_start|>"],
    }
    assert sum(thinker["text_config"]["rope_scaling"]["mrope_section"]) * 2 == head_dim
    return Qwen2_5OmniConfig(thinker_config=thinker, enable_audio_output=False)


def build_hf(out: Path, seed: int, noise_from=None):
    """Save a seeded random Omni checkpoint (thinker only) with tokenizer, processor files and a dummy spk_dict.pt."""
    import torch
    from transformers import Qwen2_5OmniForConditionalGeneration, WhisperFeatureExtractor

    ids = build_tokenizer(out, SPECIAL, CHAT_TEMPLATE)
    torch.manual_seed(seed)
    model = Qwen2_5OmniForConditionalGeneration(config(ids, _vocab(out))).float().eval()
    with torch.no_grad():
        thinker = model.thinker
        init_weights(model, thinker)
        thinker.audio_tower.proj.weight.mul_(4.0)
        thinker.audio_tower.conv1.weight.mul_(AUDIO_CONV_SCALE)
        thinker.audio_tower.conv2.weight.mul_(AUDIO_CONV_SCALE)
        for layer in thinker.model.layers:
            for proj, scale in (("q_proj", QK_SCALE), ("k_proj", QK_SCALE), ("v_proj", VO_SCALE), ("o_proj", VO_SCALE)):
                getattr(layer.self_attn, proj).weight.mul_(scale)
        if noise_from is not None:
            copy_with_noise(model, noise_from, seed, DRAFTER_NOISE)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(out, safe_serialization=True)
    WhisperFeatureExtractor(feature_size=128).save_pretrained(out)
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    torch.save({"Chelsie": {"cond": torch.zeros(1, 192), "ref_mel": torch.zeros(1, 30, 80), "bos_token": 0}},
               out / "spk_dict.pt")
    return model


def _vocab(folder: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()


def finish_mnn(hf: Path, mnn: Path) -> None:
    """Add the audio token ids llmexport 0.0.5 leaves out of llm_config.json for Omni."""
    cfg = json.loads((hf / "config.json").read_text())["thinker_config"]
    path = mnn / "llm_config.json"
    llm_config = json.loads(path.read_text())
    llm_config.update({"audio_pad": cfg["audio_token_index"], "audio_start": cfg["audio_start_token_id"],
                       "audio_end": cfg["audio_end_token_id"]})
    path.write_text(json.dumps(llm_config, indent=2, ensure_ascii=False))


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        target_hf = tmp / "tiny-omni-7b-hf"
        target = build_hf(target_hf, seed=7)
        drafter_hf = tmp / "tiny-omni-3b-hf"
        build_hf(drafter_hf, seed=3, noise_from=target)
        for hf, name in ((target_hf, "tiny-omni-7b"), (drafter_hf, "tiny-omni-3b")):
            dest = out_dir / name
            export_mnn(hf, dest)
            finish_mnn(hf, dest)
        for hf in (target_hf, drafter_hf):
            shutil.rmtree(out_dir / hf.name, ignore_errors=True)
            shutil.copytree(hf, out_dir / hf.name)
    print(f"wrote {out_dir}/tiny-omni-7b-hf, tiny-omni-3b-hf, tiny-omni-7b, tiny-omni-3b")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures")
