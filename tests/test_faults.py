"""Injected drafter faults never change or lose the target's answer (engine level, real threads).

The same faults are injected into the real Whisper drafter behind a real
server in ``test_serve``; here they run on the small deterministic model.
"""
from __future__ import annotations

import pytest

from as2d_core import DecodeOptions, run_request
from as2d_core.faults import FAULTS, FaultySource
from tiny_lm import ScriptedSource, TinyLM

MODEL = TinyLM()
OPTIONS = DecodeOptions(budget=4, publication_size=1, drain_timeout_s=0.2)


@pytest.mark.parametrize("kind", FAULTS)
def test_every_fault_leaves_the_output_exact(tiny_request, kind):
    request = tiny_request(4)
    reference = run_request(request, MODEL, None, "target-only").tokens
    source = FaultySource(ScriptedSource(reference), kind, publish_as=MODEL.vocabulary, stall_s=0.5)
    result = run_request(request, MODEL, source, "as2d", OPTIONS)
    assert result.tokens == reference
    if kind in ("raise", "garbage-out"):
        assert result.producer_error


def test_ids_outside_the_target_vocabulary_end_the_drafts_not_the_request(tiny_request):
    request = tiny_request(4)
    reference = run_request(request, MODEL, None, "target-only").tokens
    result = run_request(request, MODEL, ScriptedSource(reference[:3] + [MODEL.vocab + 5] + reference[4:]), "as2d",
                         OPTIONS)
    assert result.tokens == reference
    assert f"drafter published id {MODEL.vocab + 5}, outside the target vocabulary" in result.producer_error


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown drafter fault 'melt'"):
        FaultySource(ScriptedSource([1]), "melt")
