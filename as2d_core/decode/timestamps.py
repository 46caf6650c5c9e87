"""Whisper-style timestamp tokens: the rules that keep them well-formed at every step, and segments from them.

A vocabulary with timestamp tokens keeps them last: ``begin + i`` means ``i * precision`` seconds
into the request's audio. Whisper's decoding in timestamp mode (openai-whisper's
``ApplyTimestampRules``; faster-whisper has CTranslate2 apply the same) masks the logits before
each greedy choice, from the response so far:

- ``<|notimestamps|>`` is never chosen;
- timestamps come in pairs: after a timestamp that follows text only a timestamp or the end token may
  come; after two timestamps (or one at the start), only text;
- timestamps never decrease, and a segment's end is later than its start (openai-whisper's rule;
  CTranslate2 4.x lets an end equal its start: the one difference, and it does not touch exactness,
  which compares a target with itself);
- the first token is a timestamp, at most ``max_initial`` (1 s);
- when all timestamps together are more probable than the likeliest text token, a timestamp is chosen.

The rules depend on the response before each position, so a target applies them per verified
position with the prefix up to that position (``apply_rows``). For the positions the engine
accepts, that prefix is the committed greedy prefix, which is why as2d's tokens equal target-only's
in this mode too.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import numpy as np

from as2d_core.decode.align import Aligner, Proposal
from as2d_core.capabilities import TimestampVocabulary
from as2d_core.contracts import Request

TIME_PRECISION_S = 0.02
MAX_INITIAL_TIMESTAMP_S = 1.0


@attrs.frozen
class TimestampRules:
    """Whisper's timestamp rules for one vocabulary (``begin``: ``<|0.00|>``, the first timestamp id)."""

    begin: int
    eot: int
    no_timestamps: int
    max_initial: int | None = round(MAX_INITIAL_TIMESTAMP_S / TIME_PRECISION_S)

    def apply(self, row: np.ndarray, response: Sequence[int]) -> np.ndarray:
        """Mask one step's logits (suppressions already applied; edited in place) for the token after ``response``."""
        last = response[-1] if response else None
        penultimate = response[-2] if len(response) > 1 else None
        return self._apply(row, len(response), last, penultimate, self.last_timestamp(response))

    def apply_rows(self, rows: np.ndarray, history: Sequence[int], appended: Sequence[int]) -> np.ndarray:
        """``rows[j]`` follows ``history`` plus ``appended[: j + 1]`` (one verification); each masked in place."""
        last_timestamp = self.last_timestamp(history)
        previous = history[-1] if history else None
        for j, token in enumerate(appended):
            if token >= self.begin:
                last_timestamp = token
            self._apply(rows[j], len(history) + j + 1, token, previous, last_timestamp)
            previous = token
        return rows

    def last_timestamp(self, tokens: Sequence[int]) -> int | None:
        return next((t for t in reversed(tokens) if t >= self.begin), None)

    def _apply(self, row: np.ndarray, length: int, last: int | None, penultimate: int | None,
               last_timestamp: int | None) -> np.ndarray:
        begin = self.begin
        row[self.no_timestamps] = -np.inf
        if length == 0:
            row[:begin] = -np.inf
            if self.max_initial is not None:
                row[begin + self.max_initial + 1:] = -np.inf
            return row
        closing = False  # the last token closed a segment: the next timestamp may repeat it
        if last >= begin:
            if penultimate is None or penultimate >= begin:
                row[begin:] = -np.inf  # a segment has just opened: text comes next
            else:
                row[: self.eot] = -np.inf  # a segment has just closed: another timestamp or the end
                closing = True
        if last_timestamp is not None:
            row[begin : last_timestamp if closing else last_timestamp + 1] = -np.inf
        stamps = row[begin:]
        top = stamps.max()
        if top > -np.inf:
            stamps_logprob = top + np.log(np.exp(stamps.astype(np.float64) - top).sum())
            if stamps_logprob > row[:begin].max():
                row[:begin] = -np.inf
        return row


class TextView:
    """Proposals in timestamp mode: the aligner reads the published record without its timestamp tokens.

    A drafter's timestamps are seldom the target's to the hundredth, and it often closes a segment where
    the target does not, or the reverse: a proposal through a drafted timestamp then ends in a rejection,
    and the aligner loses its place around it. So candidates are drafted text only. The target's own call
    commits each closing timestamp (the token after its accepted candidates); after it the proposal opens
    the next segment at that time (Whisper writes ``<|e|><|e|>``), then offers the text the aligner expects
    next. A timestamp root moves the aligner only by the text its verification accepted.
    """

    def __init__(self, begin: int, eot: int) -> None:
        self.begin, self.eot = begin, eot
        self._text_root = True
        self._lead: list[int] = []

    def propose(self, aligner: Aligner, tokens: Sequence[int], response: Sequence[int], root: int,
                limit: int) -> tuple[Proposal, list[int], list[int]]:
        """The aligner's proposal over the record's text, the timestamp to put before its candidates, and where
        the record's text tokens are in it."""
        positions = [i for i, token in enumerate(tokens) if token < self.begin]
        text = [tokens[i] for i in positions]
        self._text_root, self._lead = root < self.begin, []
        if self._text_root:
            previous = next((t for t in reversed(response[:-1]) if t < self.begin), None)
            return aligner.propose(text, root, limit, previous), [], positions
        at = max(aligner.expected, aligner.floor)
        following = text[at:] if limit > 0 else []
        closing = len(response) > 1 and response[-2] < self.begin
        if closing and limit > 0 and not following[:1] == [self.eot]:
            self._lead = [root]  # the next segment opens where this one closed (or the end comes)
        return Proposal(at - 1, tuple(following[: limit - len(self._lead)])), self._lead, positions

    def settle(self, aligner: Aligner, proposal: Proposal, accepted: int) -> None:
        """``accepted``: of the lead and the candidates together, as verified."""
        if self._text_root:
            if proposal.candidates:
                aligner.verified(proposal, accepted)
            else:
                aligner.stepped(proposal)
        elif proposal.candidates and accepted >= len(self._lead):
            aligner.verified(proposal, accepted - len(self._lead))


@attrs.frozen
class Segment:
    """A stretch of one response with its times in seconds (from the request's start until ``shifted``).

    ``tokens`` are the response's tokens of the segment, its timestamp tokens included, as
    Whisper's segments carry them; ``text`` keeps Whisper's leading space.
    """

    start_s: float
    end_s: float
    text: str
    tokens: tuple[int, ...]

    def shifted(self, offset_s: float) -> "Segment":
        return attrs.evolve(self, start_s=self.start_s + offset_s, end_s=self.end_s + offset_s)

    def as_dict(self) -> dict:
        return {"start_s": self.start_s, "end_s": self.end_s, "text": self.text, "tokens": list(self.tokens)}


def split_segments(tokens: Sequence[int], begin: int, decode_text: Callable[[Sequence[int]], str], duration_s: float,
                   precision_s: float = TIME_PRECISION_S) -> list[Segment]:
    """The segments of a response decoded in timestamp mode, at the times its timestamps give.

    A segment opens at a timestamp and closes at the next one after some text. Text after the last
    timestamp (a response cut short) is a segment that ends with the request's audio (``duration_s``), so no
    text is lost; Whisper's long-form loop decodes it again in its next request. A timestamp past the end of
    the audio is kept as the model gave it, as faster-whisper and openai-whisper keep it (a request of 0.9 s of
    speech may end its segment at 2.00 s).
    """
    segments: list[Segment] = []
    held: list[int] = []
    start = None
    for token in tokens:
        if token < begin:
            held.append(token)
            continue
        at = (token - begin) * precision_s
        if any(t < begin for t in held):
            segments.append(_segment(start or 0.0, at, held + [token], decode_text))
            held, start = [], None
        else:
            held, start = [token], at  # an opening timestamp (a second one in a row replaces the first)
    if any(t < begin for t in held):
        segments.append(_segment(start or 0.0, duration_s, held, decode_text))
    return [s for s in segments if s.text.strip()]


def _segment(start: float, end: float, tokens: list[int], decode_text) -> Segment:
    return Segment(start, max(end, start), decode_text(tokens), tuple(tokens))


def marked_up(segments: Sequence[Segment], begin: int | None = None) -> str:
    """Segments as text with Whisper's timestamp markup (``<|0.00|> Hello.<|2.40|>``), times from the request's start:
    how a response conditions the next window's prompt in timestamp mode, as Whisper feeds its tokens back. With
    ``begin`` (the first timestamp token) a timestamp is written only where the segment has its token, so a
    response cut short (``max_new_tokens``) is fed back as decoded, without an end it never had."""
    def has(token: int) -> bool:
        return begin is None or token >= begin

    return "".join((f"<|{s.start_s:.2f}|>" if not s.tokens or has(s.tokens[0]) else "") + s.text
                   + (f"<|{s.end_s:.2f}|>" if not s.tokens or has(s.tokens[-1]) else "") for s in segments)


def response_segments(request: Request, session, tokens: Sequence[int], text: str) -> list[Segment]:
    """A response's segments: by its timestamp tokens in timestamp mode, else the whole request as one."""
    if request.timestamps == "none":
        return [Segment(0.0, request.duration_s, text, tuple(tokens))] if text.strip() else []
    return split_segments(tokens, session.timestamp_begin, session.decode_text, request.duration_s,
                          session.time_precision_s if isinstance(session, TimestampVocabulary) else TIME_PRECISION_S)
