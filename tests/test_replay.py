"""Replay of saved trajectories: a hand-priced trace, causality, budget 1, and real engine traces."""
from __future__ import annotations

import json

import attrs

import pytest
from conftest import full_only
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d_core.setup.catalog import resolve_bridge
from as2d_tuning.costs import Costs, MissingCost
from as2d_core.setup.options import parse_budgets
from as2d_tuning.calibration import mae
from as2d_tuning.records import read_traces, record_of
from as2d_tuning.replay import replay_record, row_of, simulate

EOS = 1
COSTS = Costs(
    verify_alone={1: 0.010, 2: 0.012, 3: 0.014, 4: 0.016},
    verify_shared={1: 0.020, 2: 0.022, 3: 0.024, 4: 0.026},
    draft_step_alone=0.004, draft_step_shared=0.005, publish=0.0, loop=0.001,
)


def _trace(second_batch_at: float, method: str = "as2d", budget: int = 3) -> dict:
    """Reference 10..15 then the end token; the drafter publishes 10..13, then 14, 15 and closes."""
    return {
        "format": "as2d-trace/1", "window": "w", "method": method, "request_id": "w", "source": "s",
        "budget": budget, "language": "en", "tokens": [10, 11, 12, 13, 14, 15], "decode_s": 0.1,
        "published": [
            {"offset": 0, "tokens": [10, 11, 12, 13], "t": 0.025, "confidences": None, "final": False},
            {"offset": 4, "tokens": [14, 15], "t": second_batch_at, "confidences": None, "final": True},
        ],
        "calls": [{"kind": "step", "commit": [11]}, {"kind": "step", "commit": [12]},
                  {"kind": "step", "commit": [13]}, {"kind": "step", "commit": [14]},
                  {"kind": "step", "commit": [15]}, {"kind": "step", "commit": [EOS]}],
        "spans": [],
    }


def test_hand_priced_trace():
    """Worked by hand (times in ms; loop 1, shared K1 20 / K2 22, alone K2 12):
    t=0 nothing published: step shared -> 21; t=21 still nothing: step -> 42;
    t=42 sees 10..13, root 12 at its expected slot, offers 13 (accepted): K2 shared -> 65;
    t=65 sees the closed record, root 14 offers 15 (accepted): K2 alone -> 78; the next token ends it."""
    record = record_of(_trace(0.060))
    out = simulate(record, COSTS, budget=3, publication="native")
    assert out.tokens == [10, 11, 12, 13, 14, 15]
    assert out.decode_s == pytest.approx(0.078)
    assert [r["width"] for r in out.rounds] == [1, 1, 2, 2]
    assert [r["alone"] for r in out.rounds] == [False, False, False, True]
    assert (out.proposed, out.accepted, out.target_only_steps) == (2, 2, 2)
    assert out.tps == pytest.approx(6 / 0.078)


def test_candidate_published_after_a_boundary_is_not_used_there():
    """The second batch appears 0.1 ms after the fourth round starts: that round decodes alone."""
    out = simulate(record_of(_trace(0.0651)), COSTS, budget=3, publication="native")
    assert out.tokens == [10, 11, 12, 13, 14, 15]
    assert [r["width"] for r in out.rounds] == [1, 1, 2, 1, 1]
    assert out.rounds[3]["visible"] == 4 and not out.rounds[3]["alone"]
    assert out.decode_s == pytest.approx(0.078 - 0.013 + 0.021 + 0.011)


def test_profile_priced_publication():
    """Re-priced drafter: batch i is visible after its forwards x step cost (+1 forward for the end token)."""
    trace = _trace(0.060)
    trace["spans"] = ([{"kind": "draft", "t0": i * 0.001, "t1": i * 0.001, "tokens": 1} for i in range(4)]
                      + [{"kind": "publish", "t0": 0.0041, "t1": 0.0041}]
                      + [{"kind": "draft", "t0": 0.005 + i * 0.001, "t1": 0.0055 + i * 0.001, "tokens": 1}
                         for i in range(2)]
                      + [{"kind": "draft", "t0": 0.008, "t1": 0.008, "tokens": 0},
                         {"kind": "publish", "t0": 0.0081, "t1": 0.0081}])
    record = record_of(trace)
    assert [(u.index, u.published) for u in record.units] == [(0, 0), (1, 0), (2, 0), (3, 4), (4, 0), (5, 0), (-1, 2)]
    out = simulate(record, COSTS, budget=3, publication="profile")  # batches at 20 ms and 35 ms
    # t=0 nothing: step shared -> 21; t=21 sees 10..13: root 11 offers 12,13 (accepted) K3 shared -> 46;
    # t=46 closed record: root 14 offers 15 (accepted) K2 alone -> 59.
    assert [r["width"] for r in out.rounds] == [1, 3, 2]
    assert out.decode_s == pytest.approx(0.059)


def test_budget_one_is_target_only_plus_single_proposals():
    record = record_of(_trace(0.001))
    out = simulate(record, COSTS, budget=1, publication="native")
    assert out.tokens == [10, 11, 12, 13, 14, 15]
    assert all(r["width"] <= 2 for r in out.rounds)
    target_only = simulate(record, COSTS, budget=None)
    assert [r["width"] for r in target_only.rounds] == [1] * 6
    assert target_only.decode_s == pytest.approx(6 * 0.011)


def test_missing_width_is_an_error_not_free():
    trace = _trace(0.0)
    trace["published"][0]["t"] = 0.0
    with pytest.raises(MissingCost):  # root 10 offers 11..15: K6 has no cost
        simulate(record_of(trace), COSTS, budget=7, publication="native")
    assert COSTS.feasible_budget(3) and not COSTS.feasible_budget(4)


def test_parse_budgets():
    assert parse_budgets("1-3,7,5-5") == [1, 2, 3, 5, 7]
    with pytest.raises(ValueError):
        parse_budgets("0-2")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(2, 6), min_size=1, max_size=30),
    st.lists(st.tuples(st.lists(st.integers(2, 6), min_size=1, max_size=6), st.floats(0, 0.3)), min_size=1,
             max_size=6),
    st.integers(1, 3),
)
def test_replay_is_causal_and_exact(reference, batches, budget):
    """Whatever the record, the response equals the reference, every round offered only
    published-by-then tokens (its anchor and candidates lie inside what it saw), and the target
    took all its threads once the record closed, or while nothing was published after it had
    decoded more tokens alone than the budget (a starved drafter)."""
    times = sorted(t for _, t in batches)
    trace = {
        "window": "h", "method": "as2d", "source": "s", "budget": budget, "language": "en", "tokens": reference,
        "decode_s": 1.0, "calls": [{"kind": "step", "commit": reference[1:] + [EOS]}], "spans": [],
        "published": [{"offset": 0, "tokens": toks, "t": t, "final": i == len(batches) - 1}
                      for i, ((toks, _), t) in enumerate(zip(batches, times))],
    }
    record = record_of(trace)
    out = simulate(record, COSTS, budget=budget, publication="native")
    assert out.tokens == reference
    lengths = []
    for b in record.batches:
        lengths.append((lengths[-1] if lengths else 0) + len(b.tokens))
    decoded = 1  # the response as each round proposes: the first token, then each round's accepted and next
    for r in out.rounds:
        published = max([n for n, b in zip(lengths, record.batches) if b.t <= r["t0"]], default=0)
        assert r["visible"] == published
        assert r["width"] - 1 <= min(budget, published)
        starved = published == 0 and decoded > budget
        assert r["alone"] == (record.batches[-1].t <= r["t0"] or starved)
        decoded += r["accepted"] + 1


def test_replays_real_engine_traces(tmp_path, tiny_request):
    """Traces from the engine (TinyLM target, scripted drafter) replay exactly at every budget."""
    from as2d_core.decode.options import DecodeOptions
    from as2d_core.decode.request import run_request
    from as2d_bench.traces import build_trace
    from tiny_lm import ScriptedSource, TinyLM

    target = TinyLM()
    request = tiny_request(3)
    reference = run_request(request, target, None, "target-only")
    drafts = list(reference.tokens[1:])
    drafts[5] = (drafts[5] + 1) % 30 + 2  # one wrong token
    source = ScriptedSource(drafts, delays=[0.001] * len(drafts))
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=4, publication_size=4))
    assert result.tokens == reference.tokens
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(build_trace("w", reference)) + "\n" + json.dumps(build_trace("w", result)) + "\n")
    costs = Costs(verify_alone={k: 0.001 * (1 + k / 4) for k in range(1, 10)}, shared_ratio=1.5,
                  draft_step_alone=0.0008, draft_step_shared=0.001, loop=0.0002)
    records = [record_of(t) for t in read_traces([tmp_path])]
    rows = []
    for record in records:
        for budget in (1, 2, 4, 8):
            for publication in ("native", "profile"):
                out = replay_record(record, costs, budget, publication=publication)
                assert out.tokens == reference.tokens
                rows.append(row_of(out, record))
    assert all(r["exact"] for r in rows)
    summary = mae(rows)
    assert summary["windows"] == 2 and summary["replay_mae_pct"] >= 0  # (window, method) groups


def test_replay_command_writes_a_bench_shaped_summary(tmp_path, tiny_request):
    import platform

    from click.testing import CliRunner

    from as2d_core.decode.options import DecodeOptions
    from as2d_core.decode.request import run_request
    from as2d_bench.traces import build_trace
    from as2d_tuning.replay_command import replay
    from tiny_lm import ScriptedSource, TinyLM

    target, request = TinyLM(), tiny_request(4)
    reference = run_request(request, target, None, "target-only")
    source = ScriptedSource(list(reference.tokens[1:]), delays=[0.001] * (len(reference.tokens) - 1))
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=4))
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(build_trace("w", r)) + "\n" for r in (reference, result)))
    widths = {str(k): {"median": 0.001 * (1 + k / 4)} for k in range(1, 9)}
    profile = {"format": "as2d-profile/1", "name": "t", "machine": {"hostname": platform.node()},
               "verify_s": {"alone": widths}, "shared_ratio": 1.3, "draft_step_s": {"alone": 0.001, "shared": 0.001},
               "loop_s": 0.0002}
    (tmp_path / "p.json").write_text(json.dumps(profile))
    out = CliRunner().invoke(replay, [str(tmp_path), "--profile", str(tmp_path / "p.json"), "--out",
                                      str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert set(summary["methods"]) == {"target-only", "as2d"}
    assert summary["methods"]["as2d"]["exact_windows"] == 1 and summary["replay_mae_pct"] >= 0
    assert "w/as2d" in summary["native"]["windows"]
    out = CliRunner().invoke(replay, [str(tmp_path), "--profile", str(tmp_path / "p.json"), "--out",
                                      str(tmp_path / "r2"), "--budgets", "1-7"])
    assert out.exit_code == 0, out.output
    summary = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert {f"as2d-b{b}" for b in range(1, 8)} <= set(summary["methods"])
    rows = [json.loads(line) for line in (tmp_path / "r2" / "results.jsonl").read_text().splitlines()]
    native = {r["method"] for r in rows if r["native_tps"] is not None}
    assert native == {"target-only", "as2d-b3"}  # only the traced configuration has a native twin


def test_load_calibration_pairs_each_round_with_its_own_target_only_run(tmp_path, tiny_request):
    """A bench's repeated rounds: every round is priced, calibrated on the target-only run of the same round
    (so target-only replays exactly in each), and the summary counts each window once."""
    import platform

    from click.testing import CliRunner

    from as2d_core.decode.options import DecodeOptions
    from as2d_core.decode.request import run_request
    from as2d_bench.traces import build_trace
    from as2d_tuning.replay_command import replay
    from tiny_lm import ScriptedSource, TinyLM

    target, request = TinyLM(), tiny_request(4)
    reference = run_request(request, target, None, "target-only")
    source = ScriptedSource(list(reference.tokens[1:]), delays=[0.001] * (len(reference.tokens) - 1))
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=4))
    traces = []
    for round_, slower in enumerate((1.0, 3.0)):  # the machine three times slower in the second round
        for run in (reference, result):
            trace = build_trace("w", run)
            trace.update(round=round_, median_round=round_ == 0, decode_s=trace["decode_s"] * slower,
                         prepare_s=trace["prepare_s"] * slower)
            traces.append(trace)
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    widths = {str(k): {"median": 0.001 * (1 + k / 4)} for k in range(1, 9)}
    profile = {"format": "as2d-profile/1", "name": "t", "machine": {"hostname": platform.node()},
               "verify_s": {"alone": widths}, "shared_ratio": 1.3, "draft_step_s": {"alone": 0.001, "shared": 0.001},
               "loop_s": 0.0002, "prepare_s": {"alone": {"1": 0.01, "30": 0.01}}}
    (tmp_path / "p.json").write_text(json.dumps(profile))
    out = CliRunner().invoke(replay, [str(tmp_path), "--profile", str(tmp_path / "p.json"), "--out",
                                      str(tmp_path / "r"), "--load-calibrate"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in (tmp_path / "r" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["round"]) for r in rows) == [("as2d", 0), ("as2d", 1), ("target-only", 0),
                                                                ("target-only", 1)]
    for r in rows:
        if r["method"] == "target-only":
            assert r["tps"] == pytest.approx(r["native_tps"])
            assert r["e2e_s"] == pytest.approx(r["tokens"] / r["native_e2e_tps"])
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["methods"]["as2d"]["windows"] == 1
    assert summary["replay"]["load_factors"]["max"] == pytest.approx(3 * summary["replay"]["load_factors"]["min"])


def test_a_drafter_the_profile_does_not_price_keeps_its_native_publication_times():
    trace = _trace(0.060)
    trace["spans"] = [{"kind": "draft", "t0": 0, "t1": 0, "tokens": 1}, {"kind": "publish", "t0": 0, "t1": 0}] * 2
    costs = attrs.evolve(COSTS, source="other-drafter")
    out = simulate(record_of(trace), costs, budget=3, publication="profile")
    assert out.publication == "native" and out.decode_s == pytest.approx(0.078)  # the hand-priced answer
    priced = attrs.evolve(costs, drafters={"s": (0.004, 0.005, 0.0)})
    assert simulate(record_of(trace), priced, budget=3, publication="profile").publication == "profile"


def _native_replay_matches(result, reference_tokens):
    """Replay ``result``'s own trace at its own measured costs and compare it with the native run, call by call."""
    from as2d_bench.traces import build_trace
    from as2d_tuning.replay import replay_native

    trace = json.loads(json.dumps(build_trace("w", result)))  # as saved to traces.jsonl
    replayed = replay_native(record_of(trace))
    assert replayed.tokens == reference_tokens
    native_calls = [(c["width"], c["accepted"]) for c in trace["calls"]]
    replayed_calls = [(r["width"], r["accepted"]) for r in replayed.rounds]
    assert replayed_calls == native_calls
    assert replayed.widths == result.verify_widths and replayed.accepted == result.accepted
    assert replayed.decode_s == pytest.approx(result.decode_s, abs=1e-6)


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_native_traces_replay_call_by_call_tiny(tiny_request, seed):
    """A drafter that drops, inserts and substitutes tokens: replay makes every decision the engine made."""
    import random

    from as2d_core.decode.options import DecodeOptions
    from as2d_core.decode.request import run_request
    from tiny_lm import ScriptedSource, TinyLM

    target = TinyLM()
    request = tiny_request(seed)
    reference = run_request(request, target, None, "target-only")
    rng = random.Random(seed)
    drafts = []
    for token in reference.tokens[1:]:
        roll = rng.random()
        if roll < 0.1:
            continue  # dropped
        drafts.append(token if roll > 0.25 else (token + 3) % 30 + 2)  # substituted
        if rng.random() < 0.05:
            drafts.append(rng.randrange(2, 32))  # inserted
    source = ScriptedSource(drafts, delays=[0.0005] * len(drafts))
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=4, publication_size=3))
    assert result.tokens == reference.tokens
    _native_replay_matches(result, reference.tokens)


@pytest.mark.parametrize("drafter, timestamps", [("whisper_source", "none"), ("whisper_ct2_source", "none"),
                                                 ("whisper_ct2_source", "segment")])
def test_native_traces_replay_call_by_call_whisper(whisper_target, drafter, timestamps, request):
    """The real Whisper pair on the bundled clip, with either drafter from arrival and in timestamp mode: the
    replay's loop is the engine's loop (in timestamp mode it proposes over the record's text as the engine does)."""
    from pathlib import Path

    from as2d_core.decode.options import DecodeOptions
    from as2d_core.contracts import Request
    from as2d_core.decode.request import run_request
    from as2d_core.input.audio import load_audio

    source = request.getfixturevalue(drafter)
    clip = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"
    speech = Request(request_id="ljspeech", audio=load_audio(clip), language="en", timestamps=timestamps)
    reference = run_request(speech, whisper_target, None, "target-only")
    result = run_request(speech, whisper_target, source, "as2d", DecodeOptions(budget=7),
                         bridge=resolve_bridge(source, whisper_target))
    assert result.tokens == reference.tokens and result.start == "arrival"
    assert (result.timestamp_ids is not None) == (timestamps == "segment")
    _native_replay_matches(result, reference.tokens)


def test_timeline_from_arrival_by_hand():
    """Target preparation 1.0 s alone, x1.5 beside the drafter; the drafter's work x2 beside it, x1.2 beside
    verification. Encoder 0.2 and a piece 0.3 (alone): both end by t=1.0 while the target has done 1.0/1.5 of
    its work; it finishes the last third alone at t=1.333. A second piece of 0.5 overlaps: the target's work
    ends at t=1.5 (all of it beside the drafter) and the drafter's remaining 0.25 s of work costs 0.3 after it."""
    from as2d_tuning.costs import Contention
    from as2d_tuning.replay import timeline

    contention = Contention(target_prepare=1.5, drafter_prepare=2.0, drafter_verify=1.2)
    prepared, ends = timeline(1.0, [0.2, 0.3], contention, "arrival")
    assert ends == [pytest.approx(0.4), pytest.approx(1.0)] and prepared == pytest.approx(1.0 + 1 / 3)
    prepared, ends = timeline(1.0, [0.2, 0.3, 0.5], contention, "arrival")
    assert prepared == pytest.approx(1.5) and ends[-1] == pytest.approx(1.5 + 0.25 * 1.2)
    prepared, ends = timeline(1.0, [0.2, 0.3], contention, "prepared", 0.05)  # encoder after the target, alone
    assert prepared == pytest.approx(1.25) and ends == [pytest.approx(1.25), pytest.approx(1.25 + 0.36)]


def test_held_pieces_share_the_batch_that_publishes_them():
    """Drafting from arrival: two pieces held while the target prepared, one bridge call publishing 9 target
    tokens of their 10 drafter tokens (recorded as a draft span of 10 tokens), then the end of the job."""
    trace = _trace(0.0)
    trace["start"] = "arrival"
    trace["published"] = [{"offset": 0, "tokens": list(range(10, 19)), "t": 0.0, "final": False},
                          {"offset": 9, "tokens": [19], "t": 0.0, "final": True}]
    trace["spans"] = [{"kind": "draft-prepare", "t0": -0.5, "t1": -0.4, "tokens": 0},
                      {"kind": "draft", "t0": -0.4, "t1": -0.3, "tokens": 6},
                      {"kind": "draft", "t0": -0.3, "t1": -0.2, "tokens": 4},
                      {"kind": "draft", "t0": -0.001, "t1": -0.0005, "tokens": 10},
                      {"kind": "publish", "t0": -0.0004, "t1": -0.0004, "tokens": 9},
                      {"kind": "draft", "t0": -0.0003, "t1": -0.0002, "tokens": 0},
                      {"kind": "publish", "t0": -0.0001, "t1": -0.0001, "tokens": 1}]
    units = record_of(trace).units
    assert [(u.index, u.tokens, u.published) for u in units] == [(0, 6, 5), (1, 4, 4), (-1, 0, 1)]
    # a third piece still in its call when the target was ready: done after the bridge call, it publishes itself
    trace["published"][1:] = [{"offset": 9, "tokens": [19, 20], "t": 0.2, "final": False},
                              {"offset": 11, "tokens": [], "t": 0.2, "final": True}]
    trace["spans"][5:] = [{"kind": "draft", "t0": -0.15, "t1": 0.2, "tokens": 3},
                          {"kind": "publish", "t0": 0.2001, "t1": 0.2001, "tokens": 2},
                          {"kind": "draft", "t0": 0.2002, "t1": 0.2002, "tokens": 0},
                          {"kind": "publish", "t0": 0.2003, "t1": 0.2003, "tokens": 0}]
    units = record_of(trace).units
    assert [(u.index, u.tokens, u.published) for u in units] == [(0, 6, 5), (1, 4, 4), (2, 3, 2), (-1, 0, 0)]


# a Ray cluster started (8 s) for the tuning commands' workers: the default run takes Ray's path in test_select, and
# the local replay this must equal is the default run's
@full_only
def test_replay_on_ray_writes_what_the_local_replay_writes(tmp_path, tiny_request):
    """Every trace priced as a Ray task (local instance, 2 CPUs): the same rows, in the same order."""
    from click.testing import CliRunner

    from as2d_core.decode.options import DecodeOptions
    from as2d_core.decode.request import run_request
    from as2d_bench.traces import build_trace
    from as2d_tuning.replay_command import replay
    from tiny_lm import ScriptedSource, TinyLM

    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed: pip install -e '.[test]'")
    target, traces = TinyLM(), []
    for seed in (1, 2, 3):
        request = tiny_request(seed)
        reference = run_request(request, target, None, "target-only")
        source = ScriptedSource(list(reference.tokens[1:]), delays=[0.001] * (len(reference.tokens) - 1))
        result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=2))
        traces += [build_trace(f"w{seed}", r) for r in (reference, result)]
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    widths = {str(k): {"median": 0.001 * (1 + k / 4)} for k in range(1, 9)}
    (tmp_path / "p.json").write_text(json.dumps({
        "format": "as2d-profile/1", "name": "t", "verify_s": {"alone": widths}, "shared_ratio": 1.3,
        "draft_step_s": {"alone": 0.001, "shared": 0.001}, "loop_s": 0.0002}))

    def run(name, *extra):
        out = CliRunner().invoke(replay, [str(tmp_path / "traces.jsonl"), "--profile", str(tmp_path / "p.json"),
                                          "--budgets", "1-7", "--no-compare-native", "--out", str(tmp_path / name),
                                          *extra])
        assert out.exit_code == 0, out.output
        return (tmp_path / name / "results.jsonl").read_text(), json.loads((tmp_path / name / "summary.json").read_text())

    local_rows, local_summary = run("local")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 ** 2, log_to_driver=False)
    try:
        ray_rows, ray_summary = run("ray", "--ray")
    finally:
        ray.shutdown()
    assert ray_rows == local_rows
    assert ray_summary == local_summary
    assert {f"as2d-b{b}" for b in range(1, 8)} <= set(local_summary["methods"])


def _members(protocol) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))


def test_the_stand_ins_keep_the_protocols_the_engine_uses(tiny_request):
    """The priced stand-ins and the engine's own parts keep the same two protocols, and the session's is a part
    of the core's contract: the loop a replay runs is the loop that decodes."""
    from as2d_core.contracts import TargetSession
    from as2d_core.decode.buffer import CandidateBuffer
    from as2d_tuning.standins import Clock, LoopSession, PricedRecord, PricedTarget, PublishedRecord
    from tiny_lm import TinyLM

    assert _members(LoopSession) <= _members(TargetSession)
    session = TinyLM().prepare(tiny_request(0), 1)
    assert isinstance(session, LoopSession)
    assert isinstance(PricedTarget([5, EOS], EOS, 4, lambda width, alone: 0.0, Clock(), True), LoopSession)
    assert isinstance(CandidateBuffer("r", "s", "t"), PublishedRecord)
    assert isinstance(PricedRecord([], lambda: 0), PublishedRecord)
    assert not isinstance(object(), PublishedRecord)
