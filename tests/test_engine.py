"""The engine on a small deterministic model: exactness for any proposals (Proposition 1)."""
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.events import decompose
from as2d_core.decode.wrappers import SessionWrapper
from tiny_lm import ScriptedSource, SlowTarget, TinyLM, edited_draft

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
    start=st.sampled_from(["arrival", "prepared"]),
)
def test_any_proposals_give_target_output(tiny_request, seed, edits, budget, publication, window, delay, shuffle_tail,
                                          start):
    request = tiny_request(seed)
    ref = reference(request)
    drafted, i = edited_draft(ref, edits)  # a draft derived from the reference by arbitrary edits, or plain junk
    if shuffle_tail:
        drafted += ref[i:][::-1]
    source = ScriptedSource(drafted, delays=[delay] * len(drafted))
    options = DecodeOptions(budget=budget, publication_size=publication, align_window=window, start=start)
    result = run_request(request, MODEL, source, "as2d", options)
    assert result.tokens == ref
    assert all(w <= budget + 1 for w in result.verify_widths)
    assert result.decomposition.check()


def test_crashing_drafter_does_not_change_output(tiny_request):
    request = tiny_request(2)
    ref = reference(request)
    # a target at 10 ms a call is still decoding when the drafter crashes, however busy the machine
    result = run_request(request, SlowTarget(delay=0.01, model=MODEL), ScriptedSource(ref, crash_after=5), "as2d",
                         DecodeOptions(publication_size=2))
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


class _StarvedUntilCalled:
    """A drafter held before its first token until the target's ``release_at``-th call, then held again after it
    (a starved drafter that gets one slice of a core); ``_ThreadsSeen`` releases it and waits for the publication."""

    vocabulary, languages, eos_token, name = "tiny", frozenset({"en"}), 1, "starved"
    ended_with_eos = False

    def __init__(self, tokens):
        self.tokens, self.go, self.published, self.done = tokens, threading.Event(), threading.Event(), threading.Event()

    def decode_text(self, tokens):
        return " ".join(f"t{t}" for t in tokens)

    def prepare(self, request, language, threads):
        return self

    def pieces(self):
        from as2d_core.contracts import DraftPiece

        self.go.wait(30)
        yield DraftPiece(tokens=tuple(self.tokens[:1]))
        self.published.set()  # the producer asks for the next piece once it has published this one
        self.done.wait(30)

    def cancel(self):  # the engine stops the drafter when the response is done
        self.done.set()

    close = cancel


class _ThreadsSeen:
    """TinyLM whose sessions note the thread count of each call, and release ``source`` at call ``release_at``."""

    name, vocabulary, device_in_use = TinyLM.name, TinyLM.vocabulary, TinyLM.device_in_use

    def __init__(self, source: _StarvedUntilCalled, release_at: int):
        self.source, self.release_at, self.threads = source, release_at, []

    def prepare(self, request, threads):
        return _ThreadsSeenSession(MODEL.prepare(request, threads), self)


class _ThreadsSeenSession(SessionWrapper):
    def __init__(self, session, seen: _ThreadsSeen):
        super().__init__(session)
        self._seen = seen

    def verify(self, root, candidates):
        seen = self._seen
        seen.threads.append(self.inner.threads)
        if len(seen.threads) == seen.release_at:
            seen.source.go.set()
            assert seen.source.published.wait(10)
        return self.inner.verify(root, candidates)


def test_a_starved_drafter_leaves_the_target_all_its_threads_until_it_publishes(tiny_request):
    """Beside a drafter that has published nothing, the target decodes on its shared threads only until it has
    decoded more tokens alone than the budget; then on all of them, and on its shared ones again once a batch
    arrives (the drafter runs again). The tokens are the target's own throughout."""
    request = tiny_request(0)
    ref = reference(request)
    source = _StarvedUntilCalled(ref)
    target = _ThreadsSeen(source, release_at=7)  # the 5th call of the loop
    options = DecodeOptions(budget=3, target_threads=2, shared_target_threads=1, publication_size=1, start="prepared")
    result = run_request(request, target, source, "as2d", options)
    assert result.tokens == ref and result.published == 1
    warm, loop = target.threads[:2], target.threads[2:]  # the prepared start warms both thread counts first
    assert sorted(warm) == [1, 2]
    assert loop[:5] == [1, 1, 1, 2, 2]  # after 1, 2 and 3 tokens alone; after 4 and more: starved
    assert set(loop[5:]) == {1}  # published at the 5th call, after it: shared again


def test_empty_drafter_runs_target_alone(tiny_request):
    request = tiny_request(4)
    result = run_request(request, MODEL, ScriptedSource([]), "as2d")
    assert result.tokens == reference(request)
    assert result.verify_calls == 0 and result.target_only_steps == len(result.tokens) - 0


def test_language_not_served_runs_target_only(tiny_request):
    from as2d_core.contracts import Request

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
    # prepared start: the drafter starts with the decode clock, so its work lies on it
    result = run_request(request, MODEL, ScriptedSource(ref, delays=[0.001] * len(ref)), "as2d",
                         DecodeOptions(start="prepared"))
    d = result.decomposition
    assert d.check()
    assert d.drafting > 0 and d.verification > 0
    assert d == decompose(result.events, *result.clock)


def test_decomposition_by_hand():
    from as2d_core.decode.events import Event

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


class DetectsGerman(TinyLM):
    """TinyLM whose language detection says 'de' when the request names no language."""

    def prepare(self, request, threads):
        session = super().prepare(request, threads)
        session.language = request.language or "de"
        return session


class SlowToPrepare(TinyLM):
    """TinyLM whose preparation (audio encoding, prefill) takes a while, as a real encoder does."""

    def prepare(self, request, threads):
        time.sleep(0.2)
        return super().prepare(request, threads)


def _producer_threads():
    return [t for t in threading.enumerate() if t.name.startswith("as2d-producer") and t.is_alive()]


def test_early_producer_stops_when_the_detected_language_is_not_served(tiny_request):
    """An English-only drafter starts at arrival; the target detects German: target-only, no thread left behind."""
    import attrs

    request = attrs.evolve(tiny_request(6), language=None)
    target = DetectsGerman()
    reference_tokens = run_request(request, target, None, "target-only").tokens
    source = ScriptedSource(list(range(2, 30)), delays=[0.01] * 28)  # languages {"en"}: starts before detection
    before = set(_producer_threads())  # other tests' stalled drafters may still be winding down
    result = run_request(request, target, source, "as2d", DecodeOptions(start="arrival"))
    assert result.tokens == reference_tokens
    assert result.source is None and result.verify_calls == 0 and result.published == 0
    assert "does not draft 'de'" in result.note
    assert not set(_producer_threads()) - before


def test_drafter_done_before_the_first_step_gives_the_target_output(tiny_request):
    """With drafting from arrival a fast drafter has published everything before the target's first step."""
    request = tiny_request(7)
    target = SlowToPrepare()
    ref = run_request(request, target, None, "target-only").tokens
    drafts = list(ref[1:])
    drafts[3] = (drafts[3] + 5) % 30 + 2  # one wrong token
    result = run_request(request, target, ScriptedSource(drafts), "as2d", DecodeOptions(start="arrival", budget=8))
    assert result.tokens == ref
    assert result.batches and max(b.published_at for b in result.batches) <= result.clock[0]
    assert result.accepted > 0 and result.start == "arrival"
    assert result.e2e_s == pytest.approx(result.prepare_s + result.decode_s) and result.prepare_s >= 0.2
