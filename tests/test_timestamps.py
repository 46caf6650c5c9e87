"""Whisper's timestamp rules and segments (``as2d_core.decode.timestamps``), and as2d's exactness with the rules on.

The rules are checked on hand-made logits against what openai-whisper's ``ApplyTimestampRules``
does; exactness for arbitrary proposals on the small deterministic model with the rules applied at
every verified position (Proposition 1 in timestamp mode).
"""
from __future__ import annotations

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.contracts import Request
from as2d_core.decode.align import Aligner
from as2d_core.decode.timestamps import TextView, TimestampRules, split_segments
from tiny_lm import ScriptedSource, TinyLM, edited_draft

EOT, NO_TIMESTAMPS, BEGIN, VOCAB = 9, 10, 11, 21  # Whisper's layout: text 0..8, the end, timestamps 11..20
RULES = TimestampRules(begin=BEGIN, eot=EOT, no_timestamps=NO_TIMESTAMPS, max_initial=3)
MODEL = TinyLM(timestamps=16)


def allowed(response, logits=None):
    row = np.zeros(VOCAB) if logits is None else np.asarray(logits, dtype=float)
    return {int(t) for t in np.flatnonzero(RULES.apply(row.copy(), response) > -np.inf)}


TEXT = set(range(EOT))


def test_the_first_token_is_a_timestamp_within_the_initial_cap():
    assert allowed([]) == {11, 12, 13, 14}


def test_timestamps_come_in_pairs():
    assert allowed([12]) == TEXT | {EOT}  # a segment opened: text (or the end)
    assert allowed([12, 5]) & set(range(BEGIN, VOCAB)) == set(range(13, VOCAB))  # its end is later than its start
    likely_end = np.zeros(VOCAB)
    likely_end[EOT] = 5.0  # (with all equal, the timestamps together would win: below)
    assert allowed([12, 5, 15], likely_end) == {EOT} | set(range(15, VOCAB))  # closed: opens at or after it, or ends
    assert allowed([12, 5, 15, 15]) == TEXT | {EOT}  # opened again: text


def test_no_timestamps_token_is_never_chosen():
    logits = np.zeros(VOCAB)
    logits[NO_TIMESTAMPS] = 50.0
    assert NO_TIMESTAMPS not in allowed([12, 5], logits)


def test_timestamps_win_when_together_more_probable_than_any_text_token():
    logits = np.zeros(VOCAB)
    logits[3] = 2.0  # the likeliest text token: e^2 = 7.4 against ten timestamps of e^0 each
    assert allowed([12, 5], logits) == set(range(13, VOCAB))
    logits[3] = 3.0  # e^3 = 20 beats them
    assert 3 in allowed([12, 5], logits)


def test_batched_rows_equal_one_row_at_a_time():
    rng = np.random.default_rng(0)
    history, appended = [12, 4, 5, 16], [16, 3, 7, 18, 18, 2]
    rows = rng.normal(0, 2, (len(appended), VOCAB))
    one_by_one = [RULES.apply(rows[j].copy(), history + appended[: j + 1]) for j in range(len(appended))]
    assert np.array_equal(RULES.apply_rows(rows.copy(), history, appended), np.stack(one_by_one))


def test_proposals_read_the_drafted_text_and_open_each_segment_where_the_target_closed_the_last():
    """The drafter closed its segment at 0.08 s, the target at 0.1 s (timestamp 16): the candidates after the
    target's closing timestamp are its opening twin, then the drafted text that follows."""
    view, aligner = TextView(BEGIN, EOT), Aligner()
    record = [11, 2, 3, 4, 15, 15, 5, 6, EOT]
    proposal, lead, _ = view.propose(aligner, record, [11], 11, 8)  # the first timestamp: text follows
    assert lead == [] and proposal.candidates == (2, 3, 4, 5, 6, EOT)
    view.settle(aligner, proposal, 3)  # 2, 3, 4 accepted; the target closed the segment at 16
    proposal, lead, _ = view.propose(aligner, record, [11, 2, 3, 4, 16], 16, 8)
    assert lead == [16] and proposal.candidates == (5, 6, EOT)
    view.settle(aligner, proposal, 2)  # the opening 16 and 5 accepted; the target went on with 7
    proposal, lead, _ = view.propose(aligner, record, [11, 2, 3, 4, 16, 16, 5, 7], 7, 8)
    assert lead == [] and proposal.candidates == (EOT,)  # 7 stands where the draft has 6 (a substitution)


def _text(tokens):
    return "".join(f" w{t}" for t in tokens if t < BEGIN)


def test_segments_from_timestamp_pairs_with_the_unfinished_tail_kept():
    """The times the timestamps give, one past the end of the audio (0.18 s of 0.15 s) too, as faster-whisper keeps
    it; the unfinished tail ends with the audio, or where it starts if that is later."""
    tokens = [11, 2, 3, 16, 16, 4, 20, 20, 5, 6]
    segments = split_segments(tokens, BEGIN, _text, duration_s=0.15)
    assert [s.text for s in segments] == [" w2 w3", " w4", " w5 w6"]
    assert [t for s in segments for t in (s.start_s, s.end_s)] == pytest.approx([0.0, 0.1, 0.1, 0.18, 0.18, 0.18])
    tail = split_segments([11, 2, 13, 13, 4], BEGIN, _text, duration_s=0.15)[-1]
    assert (tail.start_s, tail.end_s) == pytest.approx((0.04, 0.15))
    assert [list(s.tokens) for s in segments] == [[11, 2, 3, 16], [16, 4, 20], [20, 5, 6]]
    shifted = segments[0].shifted(30.0)
    assert (shifted.start_s, shifted.end_s) == pytest.approx((30.0, 30.1))


def _timestamped(seed: int) -> Request:
    rng = np.random.default_rng(seed)
    return Request(f"tiny-ts-{seed}", rng.normal(0, 0.1, 1600).astype(np.float32), language="en", timestamps="segment")


def _from_scratch(request: Request) -> list[int]:
    """Greedy decoding that recomputes every step's logits in a fresh session and applies the rules to one row."""
    plain = attrs.evolve(request, timestamps="none")
    response = [MODEL.prepare(request, 1).first_token()]
    while response[-1] != MODEL.eos_token and len(response) < MODEL.max_new_tokens:
        logits = MODEL.prepare(plain, 1)._logits(response)[-1]  # the prompt is in the fresh session's cache
        response.append(int(MODEL.rules.apply(logits, response).argmax()))
    return response[:-1] if response[-1] == MODEL.eos_token else response


def test_target_only_follows_the_rules_and_equals_a_step_by_step_decode():
    for seed in range(4):
        request = _timestamped(seed)
        tokens = run_request(request, MODEL, None, "target-only").tokens
        assert tokens == _from_scratch(request)
        stamps = [t for t in tokens if t >= MODEL.rules.begin]
        assert tokens[0] >= MODEL.rules.begin and stamps == sorted(stamps) and len(stamps) >= 2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 5),
    edits=st.lists(st.tuples(st.sampled_from(["keep", "sub", "ins", "del", "stamp"]), st.integers(0, 48)),
                   max_size=60),
    budget=st.integers(1, 16),
    publication=st.integers(1, 9),
    start=st.sampled_from(["arrival", "prepared"]),
)
def test_any_proposals_give_the_target_output_with_the_rules_on(seed, edits, budget, publication, start):
    request = _timestamped(seed)
    reference = run_request(request, MODEL, None, "target-only").tokens
    # a draft derived from the reference by arbitrary edits, with timestamps where the edits say "stamp"
    drafted, i = edited_draft(reference, edits, lambda token: [MODEL.rules.begin + token % 16])
    drafted += reference[i:]
    options = DecodeOptions(budget=budget, publication_size=publication, start=start)
    result = run_request(request, MODEL, ScriptedSource(drafted), "as2d", options)
    assert result.tokens == reference
    assert [s.tokens for s in result.segments] == [
        s.tokens for s in run_request(request, MODEL, None, "target-only").segments]


def test_a_target_without_timestamps_refuses_them(tiny_request):
    with pytest.raises(ValueError, match="does not offer timestamps"):
        run_request(attrs.evolve(tiny_request(0), timestamps="segment"), TinyLM(), None, "target-only")
