"""A small Qwen2-style byte-level BPE tokenizer for the tiny Qwen-family test models.

The real checkpoints carry a 151k-token vocabulary; tests only need the same
*format* (tokenizer.json + vocab.json + merges.txt + tokenizer_config.json with
the family's special tokens and chat template), so a ~2000-token BPE trained on
a seeded synthetic corpus keeps the fixtures small and rebuilds identically.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

VOCAB_SIZE = 2000

# Qwen2 pre-tokenizer split (the regex in the real tokenizer.json).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus(lines: int = 4000, seed: int = 0) -> list[str]:
    """Seeded pseudo-words plus a few real words, so merges are stable and text round-trips."""
    rng = random.Random(seed)
    syllables = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + ["th", "sh", "ch", "ng", "er", "an", "in"]
    words = "the a of to and in is it you that he was for on are with as I his they be at one have this".split()
    out = []
    for _ in range(lines):
        n = rng.randint(3, 12)
        sentence = []
        for _ in range(n):
            if rng.random() < 0.4:
                sentence.append(rng.choice(words))
            else:
                sentence.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
        text = " ".join(sentence)
        out.append(text[0].upper() + text[1:] + rng.choice([".", "?", "!", ","]) + " " + str(rng.randint(0, 99)))
    return out


def build(out_dir: Path, special_tokens: list[str], chat_template: str, extra: dict | None = None) -> dict[str, int]:
    """Write the tokenizer files into ``out_dir``; returns ``{special token: id}``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(special_tokens)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    tok.model.save(str(out_dir))  # vocab.json + merges.txt, as the slow Qwen2Tokenizer reads them
    ids = {t: tok.token_to_id(t) for t in special_tokens}
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 32768,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "add_prefix_space": False,
        "chat_template": chat_template,
        "added_tokens_decoder": {
            str(ids[t]): {"content": t, "lstrip": False, "rstrip": False, "normalized": False,
                          "single_word": False, "special": True}
            for t in special_tokens
        },
        "additional_special_tokens": [t for t in special_tokens if t not in ("<|endoftext|>", "<|im_end|>")],
    }
    config.update(extra or {})
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False))
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=1)
    )
    return ids
