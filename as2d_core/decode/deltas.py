"""A transcript's text as the target commits it: pieces that are never taken back.

as2d commits only verified tokens, so the text of a window's committed tokens only grows. Two
things can still change at its end, and are held back until they cannot: an unfinished multi-byte
character (the tokenizer decodes a split UTF-8 sequence as U+FFFD until its last byte arrives), and
trailing whitespace (a window's text is stripped, and windows are joined by one space, as
``Transcript.text`` joins them). So the pieces, in order, spell ``Transcript.text`` exactly.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from as2d_core.contracts import TargetSession

UNFINISHED = "\ufffd"  # what a byte-level tokenizer decodes a split multi-byte character to, until it is whole


class TextDeltas:
    """Turns each window's committed tokens (``commit``, the engine's ``on_commit``) and its final text
    (``end_window``) into text pieces for ``emit``."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._spoken = False  # an earlier window had text: the next window's text starts with a space
        self._tokens: list[int] = []
        self._sent = ""  # this window's stripped text emitted so far

    def commit(self, session: TargetSession, tokens: Sequence[int]) -> None:
        """Tokens the target has just committed in the current window."""
        self._tokens.extend(tokens)
        self._advance(session.decode_text(self._tokens).rstrip(UNFINISHED).strip())

    def end_window(self, text: str) -> None:
        """The window is done and ``text`` is its whole text (``DecodeResult.text``): emit what is left of it."""
        self._advance(text.strip(), final=True)
        self._tokens, self._sent = [], ""

    def _advance(self, text: str, final: bool = False) -> None:
        if not text.startswith(self._sent):
            if final:  # a tokenizer whose text of a prefix is not a prefix of its text: a bug to hear about
                raise RuntimeError(f"the window's text {text!r} does not continue the text already sent {self._sent!r}")
            return  # wait until it extends what was sent
        piece = text[len(self._sent):]
        if not piece:
            return
        if not self._sent and self._spoken:
            piece = " " + piece
        self._sent, self._spoken = text, True
        self._emit(piece)
