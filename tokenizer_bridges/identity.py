"""The bridge for drafters that share the target's tokenizer."""
from __future__ import annotations

from collections.abc import Sequence


class IdentityBridge:
    """Passes tokens and confidences through; maps the drafter's end token to the target's."""

    def __init__(self, source_eos: int, target_eos: int) -> None:
        self.source_eos = source_eos
        self.target_eos = target_eos

    @classmethod
    def for_request(cls, source, target, session) -> "IdentityBridge":
        """The registered factory: one bridge per request (``session`` is the target's prepared one)."""
        return cls(source.eos_token, session.eos_token)

    def push(self, tokens: Sequence[int], confidences: Sequence[float] | None):
        tokens = [self.target_eos if t == self.source_eos else int(t) for t in tokens]
        return tokens, list(confidences) if confidences is not None else None

    def finish(self, ended_with_eos: bool):
        return ([self.target_eos], None) if ended_with_eos else ([], None)
