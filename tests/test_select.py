"""Selection by replay: the oracle bounds the fixed choice; the written configuration is valid."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from as2d_tuning.costs import Costs
from as2d_tuning.select import Pair, choose, config_text, gap_pct, oracle, pooled, price_grid, records_by_source

EOS = 1


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from("ab"), st.integers(1, 6)),
                       st.lists(st.tuples(st.integers(1, 50), st.floats(0.01, 5)), min_size=3, max_size=3),
                       min_size=1))
def test_oracle_is_never_below_the_selected_pair(cells):
    grid = {Pair(s, b): {f"w{i}": c for i, c in enumerate(v)} for (s, b), v in cells.items()}
    # every pair must commit the same tokens per window (same greedy response)
    tokens = {f"w{i}": n for i, (n, _) in enumerate(next(iter(cells.values())))}
    grid = {p: {w: (tokens[w], s) for w, (_, s) in c.items()} for p, c in grid.items()}
    best, best_tps = choose(grid)
    oracle_tps, picks = oracle(grid)
    assert best_tps == max(pooled(c) for c in grid.values())
    assert oracle_tps >= best_tps * (1 - 1e-12)
    assert gap_pct(best_tps, oracle_tps) >= -1e-9
    assert set(picks) == set(tokens)


def _trace(window, source, tokens, batches):
    return {"window": window, "method": "as2d", "source": source, "budget": 7, "language": "en", "tokens": tokens,
            "decode_s": 1.0, "calls": [{"kind": "step", "commit": tokens[1:] + [EOS]}], "spans": [],
            "published": [{"offset": 0, "tokens": b, "t": t, "final": i == len(batches) - 1}
                          for i, (b, t) in enumerate(batches)]}


def test_grid_prices_every_feasible_pair_and_falls_back_for_ineligible_windows():
    ref = [2, 3, 4, 5, 6, 7, 8, 9]
    traces = [
        _trace("w0", "good", ref, [(ref, 0.0)]),
        _trace("w0", "bad", ref, [([9, 9, 9, 9], 0.0)]),
        _trace("w1", "good", ref, [(ref[:4], 0.0), (ref[4:], 0.05)]),
        _trace("w1", "bad", ref, [([9, 9], 0.0)]),
        {**_trace("w2", None, ref[:3], []), "source": None},  # a language neither source drafts
    ]
    costs = Costs(verify_alone={k: 0.01 + 0.002 * k for k in range(1, 6)}, shared_ratio=1.2,
                  draft_step_alone=0.001, draft_step_shared=0.001, loop=0.001)
    records = records_by_source(traces, ["good", "bad"])
    assert records["good"]["w2"].source is None and records["bad"]["w2"].source is None
    grid = price_grid(records, costs, [1, 2, 3, 4, 5], ["w0", "w1", "w2"], clock="decode")
    assert set(grid) == {Pair(s, b) for s in ("good", "bad") for b in (1, 2, 3, 4)}  # budget 5 needs K6
    best, _ = choose(grid)
    assert best.source == "good"
    # the ineligible window costs the same for every pair (target-only)
    assert len({grid[p]["w2"] for p in grid}) == 1


def test_config_text_is_a_valid_task_configuration(tmp_path):
    from as2d_core.setup.config import check_file, read

    base = check_file("configs/whisper-asr.toml").config
    path = tmp_path / "selected.toml"
    path.write_text(config_text(base, Pair("whisper-tiny.en", 5), "test"))
    report = check_file(path)
    assert report.ok, report.errors
    assert report.config.decode.budget == 5 and report.config.source.name == "whisper-tiny.en"
    assert read(path)["target"]["model"] == base.target.model
    json.dumps(report.as_dict())


@pytest.mark.parametrize("batch_costs", [False, True], ids=["no-batch-costs", "batch-costs"])
def test_select_command_on_saved_traces(tmp_path, batch_costs):
    from click.testing import CliRunner

    from as2d_tuning.select_command import select

    ref = [2, 3, 4, 5, 6, 7, 8, 9]
    traces = [_trace(w, "good", ref, [(ref, 0.001 * i)]) for i, w in enumerate(["d0", "d1", "t0", "t1"])]
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    for name, ids in (("dev", ["d0", "d1"]), ("test", ["t0", "t1"])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "path": f"{i}.wav"}) + "\n" for i in ids))
    widths = {str(k): 0.01 + 0.001 * k for k in range(1, 7)}
    profile = {"format": "as2d-profile/1", "name": "t", "verify_s": {"alone": widths}, "shared_ratio": 1.5,
               "draft_step_s": {"alone": 0.001, "shared": 0.001}, "loop_s": 0.001}
    if batch_costs:  # as `as2d profile` measures them: one call of 1..4 rows, 1 and 4 wide
        profile["batch_s"] = {"width": 4, "tokens_per_call": 2.5, "rows": {
            str(b): {"1": {"median": 0.01 * b ** 0.5}, "4": {"median": 0.012 * b ** 0.5}} for b in (1, 2, 4)}}
    (tmp_path / "p.json").write_text(json.dumps(profile))
    out = CliRunner().invoke(select, [str(tmp_path / "dev.jsonl"), "--test", str(tmp_path / "test.jsonl"), "--profile",
                                      str(tmp_path / "p.json"), "--sources", "good", "--budgets", "1-8", "--config",
                                      "configs/whisper-asr.toml", "--traces", str(tmp_path), "--out",
                                      str(tmp_path / "best.toml"), "--json", "--clock", "decode"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["selected"]["source"] == "good" and 1 <= report["selected"]["budget"] <= 5  # K7+ unpriced
    assert report["gap_pct"] >= -1e-9  # the oracle is never below the selected pair on the test windows
    assert (tmp_path / "best.toml").exists() and (tmp_path / "best-select" / "budgets.png").exists()
    # with batch costs the configuration names a copy of the profile whose tokens per call are the replay's of the
    # chosen pair on the development windows: its runs price their waves, its server speculate_rows from them
    from as2d_core.decode.scheduler import speculate_rows_from
    from as2d_core.setup.config import read
    from as2d_core.setup.options import options_from_config
    from as2d_tuning.costs import costs_of
    from as2d_tuning.records import read_traces
    from as2d_tuning.replay import replay_record

    written = read(tmp_path / "best.toml")  # its source "good" is this test's, not an installed one
    named = str((tmp_path / "best-select" / "profile.json").resolve()) if batch_costs else None
    assert written.get("profile") == named and options_from_config(written).profile == (named or "auto")
    if batch_costs:
        copy = json.loads(Path(named).read_text())
        records = records_by_source(read_traces([tmp_path / "traces.jsonl"]), ["good"])["good"]
        replays = [replay_record(records[w], costs_of(profile), report["selected"]["budget"]) for w in ("d0", "d1")]
        calls = sum(len(r.widths) + r.target_only_steps for r in replays)
        assert copy["batch_s"]["tokens_per_call"] == pytest.approx(sum(len(r.tokens) for r in replays) / calls)
        assert copy["batch_s"]["profiled_tokens_per_call"] == 2.5
        assert copy["batch_s"]["rows"] == profile["batch_s"]["rows"]  # what a call costs is the profile's
        assert report["batch"]["speculate_rows"] == copy["batch_s"]["speculate_rows"] == speculate_rows_from(copy)
    else:
        assert report["batch"] is None


def test_select_on_ray_picks_what_the_local_select_picks(tmp_path):
    """The sweep as Ray tasks (a local Ray instance of 2 CPUs) writes the same selection as the local run."""
    from click.testing import CliRunner

    from as2d_tuning.select_command import select

    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed: pip install -e '.[test]'")
    ref = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    traces = []
    for i, w in enumerate(["d0", "d1", "d2", "t0", "t1"]):  # "early" publishes all at once, "late" in pieces
        traces.append(_trace(w, "early", ref, [(ref[:6], 0.0), (ref[6:], 0.002 * i)]))
        traces.append(_trace(w, "late", ref, [(ref[:2], 0.01), (ref[2:5] + [9], 0.03 + 0.001 * i)]))
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    for name, ids in (("dev", ["d0", "d1", "d2"]), ("test", ["t0", "t1"])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "path": f"{i}.wav"}) + "\n" for i in ids))
    widths = {str(k): 0.01 + 0.002 * k for k in range(1, 10)}
    (tmp_path / "p.json").write_text(json.dumps({"format": "as2d-profile/1", "name": "t", "verify_s": {
        "alone": widths}, "shared_ratio": 1.4, "draft_step_s": {"alone": 0.001, "shared": 0.0015}, "loop_s": 0.001}))

    def run(name, *extra):
        args = [str(tmp_path / "dev.jsonl"), "--test", str(tmp_path / "test.jsonl"), "--profile",
                str(tmp_path / "p.json"), "--sources", "early,late", "--budgets", "1-8", "--config",
                "configs/whisper-asr.toml", "--traces", str(tmp_path / "traces.jsonl"), "--out",
                str(tmp_path / f"{name}.toml"), "--json", "--clock", "decode", *extra]
        out = CliRunner().invoke(select, args)
        assert out.exit_code == 0, out.output
        return json.loads((tmp_path / f"{name}-select" / "selection.json").read_text())

    local = run("local")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 ** 2, log_to_driver=False)
    try:
        distributed = run("ray", "--ray")
    finally:
        ray.shutdown()
    assert distributed["selected"] == local["selected"]
    assert distributed == local  # the whole ranking, oracle and gap
    assert (tmp_path / "ray.toml").read_text() == (tmp_path / "local.toml").read_text()
    assert len({(r["source"], r["budget"]) for r in local["dev_ranking"]}) > 8  # both sources, several budgets
