"""A bridge through text: drafter ids -> text -> target ids.

Byte-level BPE merges can change when more text follows, so a token is only
final once the word it belongs to is finished. The bridge therefore converts
text up to the start of the last word (a space followed by a non-space) and
holds the rest back; a published token never has to change. Cutting right
before a word-initial space is a pre-tokenizer boundary of GPT-2 style
tokenizers, so the pieces encode exactly as the whole text would.

Each target token carries the lowest confidence of the drafter tokens whose
text it was made from, so a confidence stop still works across vocabularies.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


def last_word_start(text: str, start: int) -> int:
    """Index of the last safe cut after ``start`` (``start`` if none).

    Safe cuts are pre-tokenizer boundaries that later text cannot move: a
    whitespace followed by a non-space (a new word), or clause punctuation right
    after a letter or digit, so unspaced scripts such as Chinese still publish
    at their commas and full stops. The punctuation cut holds for byte-level BPE
    tokenizers whose pre-tokenizer splits punctuation from letters (Whisper,
    GPT-2, Qwen); apostrophes and hyphens never cut. The character at the cut
    must itself be followed by something, so that a growing run is never split.
    """
    for i in range(len(text) - 2, start, -1):
        if text[i].isspace() and not text[i + 1].isspace():
            return i
        if _is_punctuation(text[i]) and text[i - 1].isalnum():
            return i
    return start


CLAUSE_PUNCTUATION = frozenset(",.;:!?，。、；：！？")


def _is_punctuation(char: str) -> bool:
    return char in CLAUSE_PUNCTUATION


class TextBridge:
    def __init__(
        self,
        decode_source: Callable[[Sequence[int]], str],
        encode_target: Callable[[str], list[int]],
        target_eos: int,
    ) -> None:
        self._decode = decode_source
        self._encode = encode_target
        self._eos = target_eos
        self._source_tokens: list[int] = []
        self._confidences: list[float | None] = []
        self._converted_chars = 0
        self._converted_tokens = 0  # drafter tokens whose text is fully converted

    @classmethod
    def for_request(cls, source, target, session) -> "TextBridge":
        """The registered factory: one bridge per request (``session`` is the target's prepared one)."""
        return cls(source.decode_text, session.encode_text, session.eos_token)

    def _convert(self, text: str, end: int, last_token: int):
        piece = text[self._converted_chars : end]
        behind = [c for c in self._confidences[self._converted_tokens : last_token] if c is not None]
        self._converted_chars = end
        self._converted_tokens = last_token
        tokens = list(self._encode(piece)) if piece else []
        confidence = min(behind) if behind else None
        return tokens, ([confidence] * len(tokens) if confidence is not None else None)

    def push(self, tokens: Sequence[int], confidences: Sequence[float] | None = None):
        self._source_tokens.extend(int(t) for t in tokens)
        self._confidences.extend(confidences if confidences is not None else [None] * len(tokens))
        text = self._decode(self._source_tokens)
        cut = last_word_start(text, self._converted_chars)
        if cut <= self._converted_chars or "\ufffd" in text[self._converted_chars : cut]:
            return [], None  # nothing finished yet, or an unfinished multi-byte character
        # drafter tokens that end at or before the cut are fully behind the converted text
        covered = len(self._source_tokens)
        while covered > self._converted_tokens and len(self._decode(self._source_tokens[:covered])) > cut:
            covered -= 1
        return self._convert(text, cut, max(covered, self._converted_tokens))

    def finish(self, ended_with_eos: bool):
        text = self._decode(self._source_tokens)
        tokens, confidences = self._convert(text, len(text), len(self._source_tokens))
        if ended_with_eos:
            tokens.append(self._eos)
            confidences = confidences + [confidences[-1]] if confidences else None
        return tokens, confidences
