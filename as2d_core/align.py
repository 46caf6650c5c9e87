"""Bounded cursor alignment over published candidates (Appendix C.3).

The aligner keeps one number that matters: ``expected``, the buffer index where
the current known root should sit if the drafter and the target agree. It never
edits published tokens or target state; it only chooses which published tokens
to offer next, and the target verifies every one of them again.

At each boundary, with root ``r``:
1. ``tokens[expected] == r``: the candidates are the tokens after it;
2. otherwise the nearest ``q`` within ``window`` of ``expected`` (forward first,
   then backward, never below ``floor``) with ``tokens[q] == r``: the drafter
   had extra tokens (deletion) or the target inserted one (insertion, found one
   boundary later through the next target token);
3. otherwise, right after a rejection, guess a substitution: ``r`` replaced the
   rejected candidate and the tokens after it follow;
4. otherwise nothing is offered and the target decodes alone, ``expected``
   moving one position per target token.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs


@attrs.define
class Proposal:
    anchor: int | None  # buffer index taken to hold the root; None when nothing matched
    candidates: tuple[int, ...]
    guessed: bool = False  # the anchor is a substitution guess, not a match


@attrs.define
class Aligner:
    window: int = attrs.field(default=8, validator=attrs.validators.ge(0))
    expected: int = 0
    floor: int = 0  # positions below were consumed by accepted candidates
    after_rejection: bool = False

    def propose(self, tokens: Sequence[int], root: int, limit: int) -> Proposal:
        """Choose up to ``limit`` published candidates to follow ``root``."""
        published = len(tokens)
        anchor, guessed = self._find(tokens, root), False
        if anchor is None and self.after_rejection and self.floor <= self.expected < published:
            anchor, guessed = self.expected, True
        if anchor is None or limit <= 0:
            return Proposal(anchor, (), guessed)
        return Proposal(anchor, tuple(tokens[anchor + 1 : anchor + 1 + limit]), guessed)

    def _find(self, tokens: Sequence[int], root: int) -> int | None:
        published = len(tokens)
        if self.floor <= self.expected < published and tokens[self.expected] == root:
            return self.expected
        for distance in range(1, self.window + 1):
            for q in (self.expected + distance, self.expected - distance):
                if self.floor <= q < published and tokens[q] == root:
                    return q
        return None

    def verified(self, proposal: Proposal, accepted: int) -> None:
        """Move the cursor after a verification of ``proposal`` that accepted ``accepted`` candidates."""
        assert proposal.anchor is not None
        next_position = proposal.anchor + accepted + 1
        self.expected = next_position
        # A guess that failed at once retires nothing: the guessed slot may still be the next target token.
        self.floor = proposal.anchor if proposal.guessed and accepted == 0 else next_position
        self.after_rejection = accepted < len(proposal.candidates)

    def stepped(self, proposal: Proposal) -> None:
        """The target decoded one token alone; assume the drafter keeps pace one for one."""
        if proposal.anchor is not None:
            self.floor = proposal.anchor if proposal.guessed else proposal.anchor + 1
            self.expected = proposal.anchor + 1
        else:
            self.expected += 1
        self.after_rejection = False
