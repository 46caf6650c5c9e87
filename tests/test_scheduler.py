"""The scheduler (``decode.scheduler``): rows join and leave at any step, and each gets its tokens alone.

Real threads on the small deterministic model, through the tiny window group of ``test_windows_together``
(each row verified by its own session, the rows of every call counted); the Whisper group on real speech is
checked through the server (``test_serve_slots``).
"""
from __future__ import annotations

import threading

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.capabilities import WindowBatching
from as2d_core.contracts import Request
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.scheduler import (Scheduler, drafting_pays_alone, scheduler_for, speculate_rows_from,
                                         wave_prices)
from as2d_tuning.batching import WaveDecodes, batch_section, batch_sweep, time_waves
from as2d_core.decode.beam import BeamOptions, run_beam_request
from test_windows_together import TinyBeamWave, TinyGroup
from tiny_lm import ScriptedSource, TinyLM


def _requests(count: int, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [Request(f"r{i}", rng.normal(size=1600).astype(np.float32), language="en") for i in range(count)]


def _staggered(scheduler: Scheduler, target, requests, starts, source, budget, decode=None):
    """Each request in a thread of its own, started once the scheduler has made ``starts[i]`` calls (or once
    nothing else runs): rows join mid-decode of the others and leave when they end. ``decode(i, admission)``
    decodes request ``i`` (by default ``run_request``, drafting where admitted to)."""
    results: list = [None] * len(requests)
    started = [False] * len(requests)
    lock = threading.Lock()
    threads: list[threading.Thread] = []

    def by_run_request(i, admission):
        method = "as2d" if admission.drafts and source is not None else "target-only"
        return run_request(requests[i], target, source, method, DecodeOptions(budget=budget)), admission.drafts

    def one(i):
        try:
            with scheduler.admit() as admission:
                results[i] = (decode or by_run_request)(i, admission)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[i] = exc

    def start_due(calls: int, everything: bool = False) -> None:
        with lock:
            for i, step in enumerate(starts):
                if not started[i] and (step <= calls or everything):
                    started[i] = True
                    threads.append(threading.Thread(target=one, args=(i,)))
                    threads[-1].start()
                    if everything:
                        return

    scheduler.listeners.append(start_due)
    start_due(0)
    while not all(started) or any(t.is_alive() for t in threads):
        for thread in list(threads):
            thread.join(timeout=60)
            assert not thread.is_alive(), "a row never ended"
        start_due(scheduler.calls, everything=True)  # nothing runs: the next row starts now
    return results


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starts=st.lists(st.integers(0, 30), min_size=2, max_size=5), budget=st.integers(1, 9),
       seed=st.integers(0, 10_000), draft=st.lists(st.integers(0, 31), max_size=40), speculate_rows=st.integers(0, 3))
def test_rows_joining_and_leaving_at_any_step_get_their_tokens_alone(starts, budget, seed, draft, speculate_rows):
    model = TinyLM(seed=seed)
    requests = _requests(len(starts), seed)
    alone = [run_request(r, model, None, "target-only").tokens for r in requests]
    group = TinyGroup(model, len(starts))
    scheduler = Scheduler(group, speculate_rows)
    results = _staggered(scheduler, scheduler.target(model), requests, starts, ScriptedSource(draft), budget)
    assert [r[0].tokens for r in results] == alone
    # every verification of every row went through the scheduler's calls, and no call held more rows than exist
    assert sum(group.calls) == sum(r[0].verify_calls + r[0].target_only_steps for r in results)
    assert max(group.calls, default=0) <= len(starts)
    for result, drafts in results:  # a row that was not to draft never started its drafter
        assert (result.source is not None) == drafts
    assert scheduler.decoding == scheduler.drafting == 0


def test_rows_side_by_side_share_calls_and_only_the_first_drafts():
    """Three rows at once: calls carry several rows, and with the default rule the row admitted alone drafts
    while those admitted beside it run target-only. Each call takes 50 ms, as a real one takes milliseconds: the
    rows that ask while it runs share the next, however the busy cores schedule their threads."""
    model = TinyLM(seed=5)
    requests = _requests(3, 5)
    alone = [run_request(r, model, None, "target-only").tokens for r in requests]
    group = TinyGroup(model, 3, call_s=0.05)
    scheduler = Scheduler(group)
    gate = threading.Barrier(3)
    admitted = [threading.Event() for _ in range(3)]
    results: list = [None] * 3

    def one(i):
        with scheduler.admit() as admission:
            admitted[i].set()
            gate.wait()  # all three admitted before any decodes
            results[i] = run_request(requests[i], scheduler.target(model), ScriptedSource(alone[i]),
                                     "as2d" if admission.drafts else "target-only", DecodeOptions(budget=4))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for i, thread in enumerate(threads):
        thread.start()
        # admitted in order; an event, not the count of rows decoding: on busy cores all three could be admitted,
        # decode and leave before this thread looks at that count again
        assert admitted[i].wait(timeout=60), f"row {i} was never admitted"
    for thread in threads:
        thread.join(timeout=60)
    assert [r.tokens for r in results] == alone
    assert [r.source is not None for r in results] == [True, False, False]
    assert max(group.calls) > 1


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starts=st.lists(st.integers(0, 20), min_size=2, max_size=5), widths=st.lists(st.integers(1, 4), min_size=5,
       max_size=5), seed=st.integers(0, 10_000), budget=st.integers(1, 6))
def test_beam_searches_joining_and_leaving_at_any_step_find_their_beams_alone(starts, widths, seed, budget):
    """Requests of any beam widths (1: greedy, a row of the group) start at any step of the others: each width's
    searches step together in the scheduler's wave of that width, and each finds the hypothesis it finds alone."""
    model = TinyLM(seed=seed)
    requests = _requests(len(starts), seed)
    widths = widths[: len(starts)]

    def alone(i):
        if widths[i] == 1:
            return run_request(requests[i], model, None, "target-only").tokens
        return run_beam_request(requests[i], model, BeamOptions(widths[i])).tokens

    waves: dict[int, TinyBeamWave] = {}
    scheduler = Scheduler(TinyGroup(model, len(starts)), 0,
                          lambda width: waves.setdefault(width, TinyBeamWave(len(starts))))
    beams, rows = scheduler.beam_target(model), scheduler.target(model)

    def decode(i, admission):
        if widths[i] == 1:
            return run_request(requests[i], rows, None, "target-only", DecodeOptions(budget=budget)), False
        return run_beam_request(requests[i], beams, BeamOptions(widths[i])), False

    results = _staggered(scheduler, None, requests, starts, None, budget, decode)
    assert [r[0].tokens for r in results] == [alone(i) for i in range(len(starts))]
    for width, wave in waves.items():  # every step of a wave was one call, carrying at most its searches
        assert wave.steps and max(wave.steps) <= widths.count(width)
    assert scheduler.calls >= sum(len(wave.steps) for wave in waves.values())


def test_a_beam_search_that_fails_or_asks_for_its_own_rows_holds_no_one_up():
    model = TinyLM(seed=3)
    requests = _requests(3, 3)
    alone = [run_beam_request(r, model, BeamOptions(3)).tokens for r in requests]
    scheduler = Scheduler(TinyGroup(model, 3), 0, lambda width: TinyBeamWave(3))

    class OneBadPrepare(TinyLM):
        def prepare(self, request, threads):
            if request.request_id == "r1":
                raise ValueError("bad audio")
            return super().prepare(request, threads)

    beams = scheduler.beam_target(OneBadPrepare(seed=3))
    results = _staggered(scheduler, None, requests, [0, 0, 0], None, 1,
                         lambda i, _: (run_beam_request(requests[i], beams, BeamOptions(3)), False))
    assert isinstance(results[1], ValueError)
    assert [results[0][0].tokens, results[2][0].tokens] == [alone[0], alone[2]]

    def own_rows_for_r0(i, _):  # sampled rows are the session's own, outside the wave: it leaves
        if i:
            return run_beam_request(requests[i], scheduler.beam_target(model), BeamOptions(3)), False
        session = scheduler.beam_target(model).prepare(requests[0], 1)
        rows = session.beam_rows(3, True)
        rows.close()
        session.close()
        return None, False

    results = _staggered(scheduler, None, requests, [0, 0, 0], None, 1, own_rows_for_r0)
    assert [results[1][0].tokens, results[2][0].tokens] == [alone[1], alone[2]]
    seated = threading.Thread(target=lambda: [scheduler.beam_rows(model.prepare(r, 1), 3) for r in requests],
                              daemon=True)
    seated.start()
    seated.join(timeout=30)
    assert not seated.is_alive(), "a search that ended kept its seat in the wave"


def test_a_target_without_beam_waves_searches_alone_under_the_scheduler():
    model = TinyLM(seed=4)
    request = _requests(1, 4)[0]
    scheduler = Scheduler(TinyGroup(model, 2))
    found = run_beam_request(request, scheduler.beam_target(model), BeamOptions(3))
    assert found.tokens == run_beam_request(request, model, BeamOptions(3)).tokens
    assert scheduler.calls == 0


def test_a_failed_call_fails_its_rows_and_frees_them():
    model = TinyLM(seed=3)
    requests = _requests(2, 3)
    scheduler = Scheduler(TinyGroup(model, 2, fail_on_call=1))
    results = _staggered(scheduler, scheduler.target(model), requests, [0, 0], None, 3)
    assert any(isinstance(r, RuntimeError) for r in results)
    again = run_request(requests[0], scheduler.target(model), None, "target-only")  # the rows were given back
    assert again.tokens == run_request(requests[0], model, None, "target-only").tokens


def test_a_target_that_cannot_batch_has_no_scheduler_and_bad_rules_are_refused():
    model = TinyLM()
    assert not isinstance(model, WindowBatching)
    assert scheduler_for(model, 4, 1) is None
    with pytest.raises(ValueError, match="speculate_rows"):
        Scheduler(TinyGroup(model, 2), -1)


def _profile(ratios: dict[int, float], tokens_per_call: float, slowdown: float = 1.0) -> dict:
    rows = {str(b): {"1": {"median": 0.01 * b}, "4": {"median": 0.01 * b * r}} for b, r in ratios.items()}
    return {"batch_s": {"width": 4, "tokens_per_call": tokens_per_call, "rows": rows},
            "slowdown": {"verify_shared_over_alone": {"4": slowdown}}}


def test_the_rule_drafts_up_to_the_batch_where_a_wide_call_costs_what_it_commits():
    ratios = {1: 1.2, 2: 1.5, 4: 2.4, 8: 3.6}  # a call 4 wide over a call 1 wide, as the batch fills
    assert speculate_rows_from(_profile(ratios, 2.0)) == 2
    assert speculate_rows_from(_profile(ratios, 3.0)) == 4
    assert speculate_rows_from(_profile(ratios, 2.0, slowdown=1.5)) == 1  # the drafter slows the target's calls
    assert speculate_rows_from(_profile(ratios, 1.1)) == 0  # drafting never pays: every decode target-only
    assert speculate_rows_from({"verify_s": {}}) is None  # not measured: the caller's default


def test_a_decode_that_is_slower_drafting_alone_drafts_in_no_batch():
    """The real decodes' clocks, arrival to last token: where drafting loses alone (its encoding beside the target's),
    neither the server's rule nor the file's waves draft, whatever the calls alone would say."""
    ratios = {1: 1.2, 2: 1.5, 4: 2.4, 8: 3.6}
    profile = _profile(ratios, 3.0)
    assert drafting_pays_alone(profile) is None and speculate_rows_from(profile) == 4  # not measured: the calls decide
    profile["batch_s"]["alone_e2e_s"] = {"as2d": 1.2, "target-only": 1.5}
    assert drafting_pays_alone(profile) is True and speculate_rows_from(profile) == 4
    assert any(p.drafts for p in wave_prices(profile, 8))
    profile["batch_s"]["alone_e2e_s"] = {"as2d": 2.1, "target-only": 1.8}
    assert drafting_pays_alone(profile) is False and speculate_rows_from(profile) == 0
    assert not any(p.drafts for p in wave_prices(profile, 8))
    profile["batch_s"]["alone_e2e_s"] = {"as2d": 2.1}
    with pytest.raises(ValueError, match="alone_e2e_s"):
        drafting_pays_alone(profile)


class _Windowed:
    """The tiny model offering the tiny window group, as a target with a windows graph does."""

    def __init__(self, model: TinyLM):
        self.model = model

    def window_group(self, size, threads):
        return TinyGroup(self.model, size)


def test_the_profile_times_group_calls_by_batch_size():
    model = TinyLM(seed=2)
    request = _requests(1, 2)[0]
    sequence = run_request(request, model, None, "target-only").tokens
    swept = batch_sweep(_Windowed(model), request, 1, sequence, 3, rows=(1, 2), repeats=2, warmup=0)
    assert set(swept["rows"]) == {"1", "2"}
    assert all(swept["rows"][b][k]["n"] == 2 for b in ("1", "2") for k in ("1", "3"))
    assert batch_sweep(model, request, 1, sequence, 3) is None  # no window group: nothing to time


class WindowedTinyLM(TinyLM):
    """The tiny model as a target with a windows graph (a file's waves decode through its group)."""

    def window_group(self, size, threads):
        return TinyGroup(self, size)


def test_the_profile_times_whole_waves_and_refuses_one_that_is_not_exact():
    """``time_waves`` decodes B copies of the request side by side, as2d and target-only, through the waves a
    file's windows take: each method's median clock per B, and every row checked against the reference; the
    profile's batch section keeps them."""
    model = WindowedTinyLM(seed=2)
    request = _requests(1, 2)[0]
    reference = run_request(request, model, None, "target-only").tokens
    decodes = WaveDecodes(model, ScriptedSource(reference[1:6]), None, DecodeOptions(budget=3), reference)
    clocks = time_waves(decodes, request, rows=(2, 3), rounds=2)
    assert set(clocks) == {"2", "3"} and all(set(c) == {"as2d", "target-only"} for c in clocks.values())
    assert all(seconds > 0 for c in clocks.values() for seconds in c.values())
    assert time_waves(attrs.evolve(decodes, target=TinyLM(seed=2)), request) is None  # no windows graph
    drafted = [run_request(request, model, decodes.source, "as2d", decodes.options)]
    alone = [run_request(request, model, None, "target-only")]
    section = batch_section(model, request, 1, reference, drafted, alone, None, 1, 0, decodes)
    assert sorted(section["waves_e2e_s"], key=int) == ["2", "4", "8"] and section["wave_row_tokens"] == len(reference)
    assert section["speculate_rows"] == speculate_rows_from({"batch_s": section})  # the waves price the rule
    with pytest.raises(RuntimeError, match="not exact"):  # a wave that gave other tokens fails the profile
        time_waves(attrs.evolve(decodes, reference=reference[:-1]), request, rows=(2,), rounds=1)
