"""Beam search (faster-whisper's semantics): against a plain reference search written here, unchanged by any
proposals, and on real speech with whisper-base, all rows in one call against each row alone."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.capabilities import BeamScoring
from as2d_core.contracts import Request
from as2d_core.decode.beam import SAMPLE_STRIDE, BeamOptions, beam_search, run_beam_request, top_candidates
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters
from as2d_core.decode.request import run_request
from conftest import speech_audio
from tiny_lm import TinyLM, edited_draft


def _tiny_request(seed: int, timestamps: bool) -> Request:
    audio = np.random.default_rng(seed).normal(0, 0.1, 1600).astype(np.float32)
    return Request(f"tiny-{seed}", audio, language="en", timestamps="segment" if timestamps else "none")


def _logprobs_after(model: TinyLM, request: Request, hypothesis: tuple[int, ...]) -> list[float]:
    """The masked log-softmax after ``hypothesis``, from a fresh session fed the whole hypothesis at once."""
    session = model.prepare(request, 1)
    if hypothesis:
        row = session._logits(list(hypothesis))
        if session.rules is not None:
            session.rules.apply_rows(row, [], list(hypothesis))
        row = row[-1]
    else:
        row = session._first_row
    top = max(row)
    total = math.log(sum(math.exp(x - top) for x in row))
    return [x - top - total for x in row]


def reference_beam(model: TinyLM, request: Request, beam: BeamOptions, max_steps: int) -> tuple[int, ...]:
    """CTranslate2's beam search as its source reads, one hypothesis at a time and every candidate sorted."""
    eos = model.eos_token
    live, cums = [()], [0.0]
    finished = []  # (ranked score, order, tokens)
    needed = math.floor(beam.beam_size * beam.patience + 0.5)
    for step in range(max_steps):
        candidates = []
        for b, hypothesis in enumerate(live):
            for token, logprob in enumerate(_logprobs_after(model, request, hypothesis)):
                candidates.append((cums[b] + logprob, b * model.vocab + token, b, token))
        candidates.sort(key=lambda c: (-c[0], c[1]))
        candidates = candidates[: 2 * beam.beam_size]
        last, top_done = step + 1 == max_steps, False
        next_live, next_cums, spare = [], [], beam.beam_size
        for k in range(beam.beam_size):
            score, _, b, token = candidates[k]
            if token == eos or last:
                top_done = top_done or k == 0
                tokens = live[b] + (() if token == eos else (token,))
                with np.errstate(divide="ignore", invalid="ignore"):
                    ranked = float(np.float64(score) / np.float64(len(tokens)) ** beam.length_penalty)
                finished.append((-math.inf if math.isnan(ranked) else ranked, len(finished), tokens))
                if last:
                    continue
                while candidates[spare][3] == eos:  # the next candidate that does not end takes its place
                    spare += 1
                score, _, b, token = candidates[spare]
                spare += 1
            next_live.append(live[b] + (token,))
            next_cums.append(score)
        if last or (top_done if beam.length_penalty == 0 else len(finished) >= needed):
            break
        live, cums = next_live, next_cums
    return max(finished, key=lambda f: (f[0], -f[1]))[2]


def _search(model, request, beam, propose=None, budget=0):
    session = model.prepare(request, 1)
    rows = session.beam_rows(beam.beam_size)
    counters = Counters()
    found = beam_search(rows, session.eos_token, session.max_new_tokens, beam, EventLog(), counters, propose, budget)
    return found, counters


beams = st.builds(BeamOptions, beam_size=st.integers(2, 6),
                  patience=st.sampled_from([0.5, 1.0, 1.5, 2.0]),
                  length_penalty=st.sampled_from([0.0, 0.6, 1.0, 1.4]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), model_seed=st.integers(0, 3), timestamps=st.booleans(), beam=beams,
       edits=st.lists(st.tuples(st.sampled_from(["keep", "keep", "keep", "sub", "ins", "del", "junk"]),
                                st.integers(0, 40)), max_size=30),
       budget=st.integers(1, 6))
def test_beams_equal_the_reference_whatever_is_proposed(seed, model_seed, timestamps, beam, edits, budget):
    model = TinyLM(seed=model_seed, max_new_tokens=12, timestamps=8 if timestamps else 0)
    request = _tiny_request(seed, timestamps)
    if 2 * beam.beam_size > model.vocab:
        return
    result = run_beam_request(request, model, beam)
    assert tuple(result.tokens) == reference_beam(model, request, beam, model.max_new_tokens)
    # proposals: edits of the result (so some hypotheses follow them), in the model's vocabulary
    drafted, _ = edited_draft(result.tokens, [(op, t % model.vocab) for op, t in edits])
    spoken, counters = _search(model, request, beam, lambda h: drafted[len(h):], budget)
    alone, _ = _search(model, request, beam)
    assert spoken.tokens == alone.tokens == tuple(result.tokens)
    assert spoken.score == pytest.approx(alone.score, rel=1e-9)
    if drafted[: len(result.tokens)] == result.tokens and len(result.tokens) > 2:
        assert counters.proposed > 0


def _best_by_sorting(scores: np.ndarray, count: int) -> list[int]:
    """The ``count`` best indices by sorting every score: the higher score first, then the lower index."""
    return sorted(range(scores.size), key=lambda i: (-scores[i], i))[:count]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.sampled_from([-math.inf, -9.5, -3.25, -3.0, -1.0, -0.5, 0.0]), min_size=1, max_size=4000),
       count=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_the_best_candidates_are_those_of_sorting_every_score(values, count, seed):
    """Ties and masked (-inf) scores included, whether the strided sample's bound is used or not: the same indices
    in the same order as sorting the whole array."""
    scores = np.array(values) + np.random.default_rng(seed).choice([0.0, 1e-3], len(values))  # some near-ties
    assert top_candidates(scores, count).tolist() == _best_by_sorting(scores, count)


def test_the_best_candidates_of_a_beam_step_of_whisper_bases_size():
    """Five rows of whisper-base's vocabulary (the sample's bound in use): as sorting, and as the whole array's
    partition, which a NaN ranks above all."""
    rng = np.random.default_rng(7)
    scores = (rng.standard_normal((5, 51865)) * 3).reshape(-1)
    scores[rng.integers(0, scores.size, 5000)] = -np.inf
    scores[rng.integers(0, scores.size, 3)] = scores.max()  # ties at the top
    assert scores[::SAMPLE_STRIDE].size > 10
    assert top_candidates(scores, 10).tolist() == _best_by_sorting(scores, 10)
    scores[[3, 70_000]] = np.nan
    threshold = np.partition(scores, scores.size - 10)[scores.size - 10]
    at_least = np.flatnonzero(scores >= threshold)
    whole = at_least[np.argsort(-scores[at_least], kind="stable")[:10]]
    assert top_candidates(scores, 10).tolist() == whole.tolist()


def test_a_right_proposal_spares_calls():
    """Where the drafts are the hypotheses' own continuations, steps need no call (the speculative path runs)."""
    model = TinyLM(seed=1, max_new_tokens=16)
    request = _tiny_request(3, False)
    beam = BeamOptions(2, length_penalty=0.0)
    alone, plain = _search(model, request, beam)

    def propose(hypothesis):  # the hypothesis' own greedy continuation, as a perfect drafter would give it
        session = model.prepare(request, 1)
        root, drafted = session.verify(hypothesis[0], list(hypothesis[1:]))[-1], []
        while len(drafted) < 4 and root != model.eos_token:
            drafted.append(root)
            root = session.verify(root, [])[0]
        return drafted

    spoken, counters = _search(model, request, beam, propose, 4)
    assert spoken.tokens == alone.tokens
    assert counters.accepted > 0
    assert counters.verify_calls + counters.target_only_steps < plain.target_only_steps


def test_scores_are_faster_whispers(tiny_request):
    model = TinyLM(seed=2)
    request = Request("s", tiny_request(5).audio, language="en", scores=False)
    result = run_beam_request(request, model, BeamOptions(3))
    assert result.method == "beam" and result.avg_logprob is None and result.tokens
    assert result.segments and result.segments[0].tokens == tuple(result.tokens)


@pytest.mark.parametrize("fields, message", [
    ({"beam_size": 1}, "beam_size 1 is greedy"),
    ({"beam_size": 0}, "at least 2"),
    ({"patience": 0}, "patience must be above 0"),
    ({"beam_size": 2, "patience": 0.2}, "leaves no hypothesis"),
])
def test_bad_beam_options_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        BeamOptions(**fields)


def test_what_beam_search_refuses(tiny_request):
    model = TinyLM()
    with pytest.raises(ValueError, match="temperature 0"):
        run_beam_request(Request("t", tiny_request().audio, temperature=0.5), model, BeamOptions(2))
    with pytest.raises(ValueError, match="needs 40 candidates"):
        run_beam_request(tiny_request(), model, BeamOptions(20))
    with pytest.raises(TypeError, match="BeamOptions"):
        run_beam_request(tiny_request(), model, 5)


# previous text, as conditioning feeds it: a long prompt, before the start of transcript, that no row writes to
PREVIOUS_TEXT = ("Printing, in the only sense with which we are at present concerned, differs from most if not from "
                 "all the arts and crafts represented in the exhibition.")


@pytest.mark.parametrize("timestamps, previous_text", [("none", None), ("segment", PREVIOUS_TEXT)])
def test_whisper_beams_in_one_call_equal_each_row_alone(whisper_target, timestamps, previous_text):
    """whisper-base on a real window: the beams graph's one call per step (the prompt one block that every row
    reads) gives the beams that each hypothesis decoded on its own decoder state gives, after a long prompt of
    previous text too; so does the windows graph's call, where drafts of the greedy result change nothing either
    (checked in timestamp mode, where beams and drafts disagree most)."""
    from as2d_whisper.beams import SeparateRows, SharedPromptRows, WindowsRows

    request = Request("cards", speech_audio("cmu_cards_en_w00"), language="en", timestamps=timestamps, scores=True,
                      prompt=previous_text)
    session = whisper_target.prepare(request, 2)
    rows = session.beam_rows(4)
    assert isinstance(rows, SharedPromptRows) and len(session.prompt) > (20 if previous_text else 0)
    rows.close()
    session.close()
    beam = BeamOptions(4)
    result = run_beam_request(request, whisper_target, beam)
    greedy = run_request(request, whisper_target, None, "target-only")
    assert result.text.strip() and result.verify_calls == 0 and result.target_only_steps > 0
    assert result.no_speech_prob == pytest.approx(greedy.no_speech_prob, abs=1e-6)
    assert -1.0 < result.avg_logprob < 0
    if timestamps == "segment":
        begin = whisper_target.model.timestamp_begin
        assert result.tokens[0] >= begin and result.segments
        assert "".join(s.text for s in result.segments) == result.text
    checks = [(SeparateRows, None)] + ([(WindowsRows, lambda h: greedy.tokens[len(h):])] if timestamps == "segment" else [])
    for layout, propose in checks:
        session = whisper_target.prepare(request, 2)
        assert isinstance(session, BeamScoring)
        rows = layout(session, beam.beam_size)
        try:
            found = beam_search(rows, session.eos_token, session.max_new_tokens, beam, EventLog(), Counters(),
                                propose, 4)
        finally:
            rows.close()
            session.close()
        assert list(found.tokens) == result.tokens, f"{layout.__name__}: {found.tokens} != {result.tokens}"
        assert found.avg_logprob(beam.length_penalty) == pytest.approx(result.avg_logprob, abs=1e-4)


def test_rows_on_the_windows_graph_read_no_memory_they_did_not_write(whisper_target, monkeypatch):
    """Rows of unequal lengths in one call of the windows graph attend to the positions past a shorter row's own
    with weight 0, and 0 times a NaN is NaN: their cache starts as zeros, so memory handed out full of NaN (as
    reused memory may be) changes no logit. It gave NaN logits now and then under load."""
    import as2d_whisper.beams as beams

    request = Request("cards", speech_audio("cmu_cards_en_w00"), language="en")
    steps = [[(0, 0, [440]), (1, 0, [440, 262]), (2, 0, [50])], [(1, 2, [11]), (0, 1, [300]), (2, 1, [7, 8])]]

    def logits() -> list[np.ndarray]:
        session = whisper_target.prepare(request, 2)
        rows = beams.WindowsRows(session, 3)
        try:
            return [row for step in steps for row in rows.advance(step)]
        finally:
            rows.close()
            session.close()

    clean = logits()
    nan_filled = {"empty": lambda shape, dtype=float: np.full(shape, np.nan, dtype)}
    monkeypatch.setattr(beams, "np", types.SimpleNamespace(**{**vars(np), **nan_filled}))
    for ours, theirs in zip(logits(), clean, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert all(np.isfinite(row).any() for row in clean)


@pytest.mark.parametrize("previous_text", [None, PREVIOUS_TEXT])
def test_the_semantics_are_ctranslate2s(previous_text):
    """whisper-tiny.en decoded by as2d's beam search (ONNX Runtime) and by CTranslate2's, as faster-whisper calls it,
    on the same features: the same tokens at length penalty 1 and 0 (0 ends at the first finished best beam), which
    here give different texts (1's unlike greedy's); avg_logprob as faster-whisper derives it, up to the runtimes.
    With previous text, the rows share its positions in their caches as they are (each row copies only the response
    positions it takes from another)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from as2d_core.setup.paths import models_dir
    from as2d_whisper.features import request_encoder_input
    from as2d_whisper.target import WhisperTarget

    target = WhisperTarget(models_dir() / "whisper-tiny.en")
    theirs = ctranslate2.models.Whisper(str(models_dir() / "whisper-tiny.en-ct2"), device="cpu",
                                        compute_type="float32", intra_threads=2)
    request = Request("cards", speech_audio("cmu_cards_en_w00"), language="en", scores=True, prompt=previous_text)
    features = ctranslate2.StorageView.from_array(request_encoder_input(request, 80))
    session = target.prepare(request, 2)
    prompt = session.prompt
    session.close()
    found = {}
    for length_penalty in (1.0, 0.0):
        ours = run_beam_request(request, target, BeamOptions(5, length_penalty=length_penalty))
        reference = theirs.generate(features, [prompt], beam_size=5, patience=1.0, length_penalty=length_penalty,
                                    max_length=448, return_scores=True, suppress_blank=True, suppress_tokens=[-1],
                                    max_initial_timestamp_index=50)[0]
        tokens = reference.sequences_ids[0]
        assert ours.tokens == tokens, f"{ours.text!r} != {target.model.decode_text(tokens)!r}"
        average = reference.scores[0] * len(tokens) ** length_penalty / (len(tokens) + 1)
        assert ours.avg_logprob == pytest.approx(average, abs=0.01)
        found[length_penalty] = ours.tokens
    if previous_text is None:
        assert found[1.0] != found[0.0] and found[1.0] != run_request(request, target, None, "target-only").tokens
    else:
        assert len(prompt) > 20 and found[1.0]
