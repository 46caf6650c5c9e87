"""A bridge through text: drafter ids -> text -> target ids.

Byte-level BPE merges can change when more text follows, so a token is only
final once the word it belongs to is finished. The bridge therefore converts
text up to the start of the last word (a space followed by a non-space) and
holds the rest back; a published token never has to change. Cutting right
before a word-initial space is a pre-tokenizer boundary of GPT-2 style
tokenizers, so the pieces encode exactly as the whole text would.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence


def last_word_start(text: str, start: int) -> int:
    """Index of the last word-initial whitespace after ``start`` (``start`` if none)."""
    for i in range(len(text) - 2, start, -1):
        if text[i].isspace() and not text[i + 1].isspace():
            return i
    return start


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
        self._converted_chars = 0

    def _convert(self, end: int) -> list[int]:
        text = self._decode(self._source_tokens)
        piece = text[self._converted_chars : end if end >= 0 else len(text)]
        self._converted_chars += len(piece)
        return list(self._encode(piece)) if piece else []

    def push(self, tokens: Sequence[int], confidences: Sequence[float] | None = None):
        """Confidences do not survive re-tokenization, so none are returned."""
        self._source_tokens.extend(int(t) for t in tokens)
        text = self._decode(self._source_tokens)
        cut = last_word_start(text, self._converted_chars)
        if "\ufffd" in text[self._converted_chars : cut]:
            return [], None  # an unfinished multi-byte character: wait for its other bytes
        return (self._convert(cut) if cut > self._converted_chars else []), None

    def finish(self, ended_with_eos: bool):
        tokens = self._convert(-1)
        if ended_with_eos:
            tokens.append(self._eos)
        return tokens, None
