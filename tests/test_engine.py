"""The engine on a small deterministic model: exactness for any proposals (Proposition 1)."""
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core import DecodeOptions, run_request
from as2d_core.events import decompose
from tiny_lm import ScriptedSource, TinyLM

MODEL = TinyLM()


def reference(request):
    return run_request(request, MODEL, None, "target-only").tokens


def test_target_only_is_plain_greedy(tiny_request):
    request = tiny_request(0)
    session = MODEL.prepare(request, 1)
    tokens, token = [], session.first_token()
    while token != session.eos_token and len(tokens) < session.max_new_tokens:
        tokens.append(token)
        token = session.verify(token, [])[0]
    assert run_request(request, MODEL, None, "target-only").tokens == tokens
    assert len(tokens) > 10


def test_perfect_drafter_is_exact_and_saves_calls(tiny_request):
    request = tiny_request(1)
    ref = reference(request)
    result = run_request(request, MODEL, ScriptedSource(ref), "as2d", DecodeOptions(budget=7, publication_size=4))
    assert result.tokens == ref
    assert result.accepted > 0
    assert result.verify_calls + result.target_only_steps < len(ref)
    assert max(result.verify_widths) <= 8


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 5),
    edits=st.lists(st.tuples(st.sampled_from(["keep", "sub", "ins", "del", "junk"]), st.integers(0, 31)), max_size=60),
    budget=st.integers(1, 16),
    publication=st.integers(1, 9),
    window=st.integers(0, 10),
    delay=st.sampled_from([0.0, 0.0, 0.0005, 0.002]),
    shuffle_tail=st.booleans(),
)
def test_any_proposals_give_target_output(tiny_request, seed, edits, budget, publication, window, delay, shuffle_tail):
    request = tiny_request(seed)
    ref = reference(request)
    drafted, i = [], 0
    for op, token in edits:  # derive a draft from the reference by arbitrary edits, or plain junk
        if op == "keep" and i < len(ref):
            drafted.append(ref[i]); i += 1
        elif op == "sub":
            drafted.append(token); i += 1
        elif op == "ins":
            drafted.append(token)
        elif op == "del":
            i += 1
        else:
            drafted.extend([token, token])
    if shuffle_tail:
        drafted += ref[i:][::-1]
    source = ScriptedSource(drafted, delays=[delay] * len(drafted))
    options = DecodeOptions(budget=budget, publication_size=publication, align_window=window)
    result = run_request(request, MODEL, source, "as2d", options)
    assert result.tokens == ref
    assert all(w <= budget + 1 for w in result.verify_widths)
    assert result.decomposition.check()


def test_crashing_drafter_does_not_change_output(tiny_request):
    request = tiny_request(2)
    ref = reference(request)
    result = run_request(request, MODEL, ScriptedSource(ref, crash_after=5), "as2d", DecodeOptions(publication_size=2))
    assert result.tokens == ref
    assert "crashed on purpose" in result.producer_error


def test_stalled_drafter_does_not_stop_target(tiny_request):
    request = tiny_request(3)
    ref = reference(request)
    start = time.perf_counter()
    result = run_request(request, MODEL, ScriptedSource(ref, stall_after=3), "as2d", DecodeOptions(publication_size=1))
    assert result.tokens == ref
    assert result.target_only_steps > 0
    assert time.perf_counter() - start < 10  # the stall lasts 30 s unless the job is closed


def test_empty_drafter_runs_target_alone(tiny_request):
    request = tiny_request(4)
    result = run_request(request, MODEL, ScriptedSource([]), "as2d")
    assert result.tokens == reference(request)
    assert result.verify_calls == 0 and result.target_only_steps == len(result.tokens) - 0


def test_language_not_served_runs_target_only(tiny_request):
    from as2d_core import Request

    request = tiny_request(5)
    source = ScriptedSource([3, 4, 5])
    source.languages = frozenset({"de"})
    result = run_request(request, MODEL, source, "as2d", DecodeOptions(target_threads=2))
    assert result.source is None and result.verify_calls == 0
    assert "does not draft 'en'" in result.note
    assert result.tokens == reference(request)


def test_budget_out_of_range_is_refused():
    with pytest.raises(ValueError, match="budget must be between 1"):
        DecodeOptions(budget=0)
    with pytest.raises(ValueError, match="budget must be between 1"):
        DecodeOptions(budget=65)


def test_decomposition_identity_on_a_real_run(tiny_request):
    request = tiny_request(6)
    ref = reference(request)
    result = run_request(request, MODEL, ScriptedSource(ref, delays=[0.001] * len(ref)), "as2d")
    d = result.decomposition
    assert d.check()
    assert d.drafting > 0 and d.verification > 0
    assert d == decompose(result.events, *result.clock)


def test_decomposition_by_hand():
    from as2d_core.events import Event

    events = [
        Event("draft", 0.0, 2.0),
        Event("draft", 1.0, 3.0),  # overlaps the first: D is a union
        Event("verify", 2.5, 4.0),
        Event("step", 5.0, 6.0),
        Event("align", 4.0, 5.0),  # neither model: residual
    ]
    d = decompose(events, 0.0, 7.0)
    assert (d.total, d.drafting, d.verification, d.overlap) == (7.0, 3.0, 2.5, 0.5)
    assert d.residual == pytest.approx(2.0)
    assert d.check()
