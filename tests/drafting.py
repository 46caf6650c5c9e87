"""Decode options for real-speech tests that check the drafter published something."""
from __future__ import annotations

from as2d_core.decode.options import DecodeOptions


def options_that_draft(**fields) -> DecodeOptions:
    """The drafter at the target's priority even on a guessed language: a drafter niced below the target
    (the default for a guess) may publish nothing before the target ends when the machine is busy, as in
    a full test run; the output is exact either way, but these tests also check that drafting happened."""
    return DecodeOptions(guess_nice=0, **fields)
