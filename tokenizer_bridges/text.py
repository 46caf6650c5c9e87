"""A bridge through text: drafter ids -> text -> target ids.

Byte-level BPE merges can change when more text follows, so a token is only
final once the word it belongs to is finished. The bridge therefore converts
text up to the start of the last word (a space followed by a non-space) and
holds the rest back; a published token never has to change. Cutting right
before a word-initial space is a pre-tokenizer boundary of GPT-2 style
tokenizers, so the pieces encode exactly as the whole text would.

Each target token carries the lowest confidence of the drafter tokens whose
text it was made from, so a confidence stop still works across vocabularies.

Timestamp tokens (Whisper's, when the drafter and the target both have them:
``timestamp_begin`` and ``time_precision_s``) carry no text: each ends the text
before it, which is then converted whole (a segment's text is encoded on its
own), and passes as the target's timestamp of the same time.
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
        timestamps: tuple[int, int] | None = None,
    ) -> None:
        self._decode = decode_source
        self._encode = encode_target
        self._eos = target_eos
        self._timestamps = timestamps  # (the drafter's first timestamp id, the target's), or None
        self._start_segment()

    def _start_segment(self) -> None:
        self._source_tokens: list[int] = []  # the current segment's (all, without timestamps)
        self._confidences: list[float | None] = []
        self._converted_chars = 0
        self._converted_tokens = 0  # drafter tokens whose text is fully converted

    @classmethod
    def for_request(cls, source, target, session) -> "TextBridge":
        """The registered factory: one bridge per request (``session`` is the target's prepared one)."""
        return cls(source.decode_text, session.encode_text, session.eos_token, timestamp_ids(source, session))

    def _convert(self, text: str, end: int, last_token: int):
        piece = text[self._converted_chars : end]
        behind = [c for c in self._confidences[self._converted_tokens : last_token] if c is not None]
        self._converted_chars = end
        self._converted_tokens = last_token
        tokens = list(self._encode(piece)) if piece else []
        confidence = min(behind) if behind else None
        return tokens, ([confidence] * len(tokens) if confidence is not None else None)

    def push(self, tokens: Sequence[int], confidences: Sequence[float] | None = None):
        if self._timestamps is None:
            return self._push_text(tokens, confidences)
        confidences = list(confidences) if confidences is not None else [None] * len(tokens)
        source_begin, target_begin = self._timestamps
        parts, start = [], 0
        for i, token in enumerate(tokens):
            if token >= source_begin:  # the segment's text is complete: convert it all, then the timestamp
                parts += [self._push_text(tokens[start:i], confidences[start:i]), self._end_segment(),
                          ([int(token) - source_begin + target_begin], confidences[i : i + 1])]
                start = i + 1
        parts.append(self._push_text(tokens[start:], confidences[start:]))
        return _joined(parts)

    def _end_segment(self):
        text = self._decode(self._source_tokens)
        converted = self._convert(text, len(text), len(self._source_tokens))
        self._start_segment()
        return converted

    def _push_text(self, tokens: Sequence[int], confidences: Sequence[float | None] | None):
        if not tokens:
            return [], None
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


def timestamp_ids(source, session) -> tuple[int, int] | None:
    """(drafter's, target's) first timestamp id when both have timestamp tokens of the same precision."""
    begins = [getattr(part, "timestamp_begin", None) for part in (source, session)]
    precisions = {getattr(part, "time_precision_s", None) for part in (source, session)}
    return None if None in begins or len(precisions) != 1 else (begins[0], begins[1])


def _joined(parts: list[tuple[list[int], list | None]]):
    """Several (tokens, confidences) results as one; confidences only if every part with tokens has them."""
    tokens = [t for part, _ in parts for t in part]
    known = all(c is not None and None not in c for part, c in parts if part)
    return tokens, ([c for part, confs in parts if part for c in confs] if known and tokens else None)
