"""Bounded cursor alignment over published candidates (Appendix C.3).

The aligner keeps one number that matters: ``expected``, the buffer index where
the current known root should sit if the drafter and the target agree. It never
edits published tokens or target state; it only chooses which published tokens
to offer next, and the target verifies every one of them again.

At each boundary, with root ``r`` (and ``p``, the committed token before it):
1. ``tokens[expected] == r``: the candidates are the tokens after it;
2. otherwise the nearest ``q`` within ``window`` of ``expected`` (forward
   first, never below ``floor``) where the draft agrees on two tokens,
   ``tokens[q - 1:q + 1] == [p, r]``;
3. otherwise ``q = expected + 1`` or ``expected - 1`` with ``tokens[q] == r``:
   a token the drafter had extra (deletion) or the target inserted (found one
   boundary later through the next target token);
4. otherwise, right after a rejection, guess a substitution: ``r`` replaced the
   rejected candidate and the tokens after it follow. The first boundary counts as
   one: the target's first token stands where the drafter's first one does (" in"
   against " In"), and the draft after it is worth a verification;
5. otherwise the nearest single-token match within ``window``;
6. otherwise nothing is offered and the target decodes alone, ``expected``
   moving one position per target token.
After ``give_up`` verifications in a row that accepted nothing, only rules 1-3
(a match) apply until one is accepted again: a drafter that lost the target's
text (a target that skips a sentence the drafter kept) then costs single
target steps, not a failed verification each.
Frequent tokens (commas, " the") match far too easily on their own, which is
why a distant match needs the two-token agreement of rule 2 to win over the
substitution guess.
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
    after_rejection: bool = True  # the last verification rejected a candidate; the first boundary counts as one
    give_up: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    misses: int = 0  # verifications in a row that accepted nothing

    def propose(self, tokens: Sequence[int], root: int, limit: int, previous: int | None = None) -> Proposal:
        """Choose up to ``limit`` published candidates to follow ``root`` (``previous`` committed before it)."""
        published = len(tokens)
        anchor, guessed = self._find(tokens, root, previous), False
        searching = self.misses < self.give_up
        if anchor is None and searching and self.after_rejection and self.floor <= self.expected < published:
            anchor, guessed = self.expected, True
        if anchor is None and searching:
            anchor = self._nearest(tokens, root, self.window)
        if anchor is None or limit <= 0:
            return Proposal(anchor, (), guessed)
        return Proposal(anchor, tuple(tokens[anchor + 1 : anchor + 1 + limit]), guessed)

    def _positions(self, distance: int, published: int):
        """Published positions around ``expected``, nearest first, forward before backward."""
        for d in range(1, distance + 1):
            for q in (self.expected + d, self.expected - d):
                if self.floor <= q < published:
                    yield q

    def _nearest(self, tokens: Sequence[int], root: int, distance: int) -> int | None:
        return next((q for q in self._positions(distance, len(tokens)) if tokens[q] == root), None)

    def _find(self, tokens: Sequence[int], root: int, previous: int | None) -> int | None:
        published = len(tokens)
        if self.floor <= self.expected < published and tokens[self.expected] == root:
            return self.expected
        if previous is not None:
            for q in self._positions(self.window, published):
                if tokens[q] == root and q >= 1 and tokens[q - 1] == previous:
                    return q
        return self._nearest(tokens, root, min(1, self.window))

    def verified(self, proposal: Proposal, accepted: int) -> None:
        """Move the cursor after a verification of ``proposal`` that accepted ``accepted`` candidates."""
        assert proposal.anchor is not None
        self.expected = proposal.anchor + accepted + 1
        # Only verified candidates retire their positions; an anchor that led nowhere may have been a
        # wrong match, and the right one can still lie behind it.
        if accepted:
            self.floor = max(self.floor, self.expected)
        self.misses = 0 if accepted else self.misses + 1
        self.after_rejection = accepted < len(proposal.candidates)

    def stepped(self, proposal: Proposal) -> None:
        """The target decoded one token alone; assume the drafter keeps pace one for one."""
        if proposal.anchor is not None:
            self.expected = proposal.anchor + 1
        else:
            self.expected += 1
        self.after_rejection = False
