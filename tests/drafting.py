"""Decode options and a paced target for real-speech tests that check the drafter's tokens were verified."""
from __future__ import annotations

import time

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.wrappers import SessionWrapper, TargetWrapper


def options_that_draft(**fields) -> DecodeOptions:
    """The drafter at the target's priority even on a guessed language: a drafter niced below the target
    (the default for a guess) may publish nothing before the target ends when the machine is busy, as in
    a full test run; the output is exact either way, but these tests also check that drafting happened."""
    return DecodeOptions(guess_nice=0, **fields)


class PacedTarget(TargetWrapper):
    """The real target at a phone's pace: a pause before each verification. On a machine whose drafter is slower
    than its target (a cached encoding and a short clip: the target may end before the first draft is
    published), the drafts then arrive while the target decodes, so a test can check that they were verified
    without depending on which core's job is faster. The tokens are the target's own."""

    def __init__(self, inner, pause_s: float = 0.03) -> None:
        super().__init__(inner)
        self.pause_s = pause_s

    def prepare(self, request, threads):
        return _PacedSession(self.inner.prepare(request, threads), self.pause_s)


class _PacedSession(SessionWrapper):
    def __init__(self, inner, pause_s: float) -> None:
        super().__init__(inner)
        self.pause_s = pause_s

    def verify(self, root, candidates):
        time.sleep(self.pause_s)
        return self.inner.verify(root, candidates)
