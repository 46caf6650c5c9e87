"""Device profiles: measurement on the contracts (TinyLM), R(K), piece fits, staleness, and the paper's phone files."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from as2d_tuning.costs import MissingCost, costs_of, interpolate, load_profile
from as2d_tuning.measurement import Measurement
from as2d_tuning.stats import ProfileError, fit_pieces, r_of_k, stat
from as2d_tuning.timing import JobTiming
from as2d_tuning.versions import staleness

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


def test_stat_and_r_of_k_by_hand():
    s = stat([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["n"], s["min"], s["max"]) == (3.0, 5, 1.0, 5.0)
    verify = {"1": {"median": 10, "mean": 10, "stdev": 1}, "4": {"median": 20, "mean": 20, "stdev": 4}}
    r = r_of_k(verify)
    assert r["1"]["r_pct"] == pytest.approx(0.0)
    assert r["4"]["r_pct"] == pytest.approx(50.0)  # 1 - 20 / (4 x 10)
    assert r["4"]["err_pct"] == pytest.approx(10.0)  # 100 x 4 / (4 x 10)


def test_a_measurement_without_samples_names_what_did_not_run():
    with pytest.raises(ProfileError, match="no sample of the drafter's step was measured"):
        stat([], "the drafter's step")
    with pytest.raises(ProfileError, match="drafter quiet drafted no token"):
        fit_pieces([JobTiming(5.0, 0.01, (), 0.001)], "drafter quiet")


def test_piece_fit_separates_a_token_from_a_call():
    """Pieces of 2 ms + 1 ms per token (later ones 5 ms +): the fit finds both parts; one-token pieces fold the
    per-token part into the fixed ones."""
    jobs = [JobTiming(s, 0.01, ((0.002 + 0.001 * n, n), (0.005 + 0.001 * (n + 3), n + 3), (0.005 + 0.001 * 2, 2)), 0.0)
            for s, n in ((2.0, 4), (5.0, 10), (9.0, 25))]
    fit = fit_pieces(jobs, "drafter")
    assert fit["per_token"] == pytest.approx(0.001)
    assert (fit["first"], fit["next"]) == (pytest.approx(0.002), pytest.approx(0.005))
    single = fit_pieces([JobTiming(1.0, 0.1, ((0.006, 1), (0.004, 1), (0.004, 1)), 0.004)], "drafter")
    assert (single["per_token"], single["first"], single["next"], single["end"]) == (0.0, 0.006, 0.004, 0.004)


def test_a_line_that_one_slow_sample_does_not_tilt():
    from as2d_tuning.stats import theil_sen

    points = [(s, 0.5 + 0.01 * s) for s in (1, 2, 4, 8, 16, 30)] + [(30, 2.0)]  # one sample under a burst of load
    line = theil_sen(points)
    assert line["slope"] == pytest.approx(0.01) and line["intercept"] == pytest.approx(0.5)


def test_the_target_is_prepared_at_five_lengths_spread_over_the_drafters():
    from as2d_tuning.measurement import LENGTHS
    from as2d_tuning.stats import spread

    assert spread(LENGTHS, 5) == [1.0, 6.0, 11.0, 20.0, 30.0] and spread([2.0, 6.0], 5) == [2.0, 6.0]


def test_interpolate_by_audio_length():
    table = {2.0: 0.1, 4.0: 0.3, 10.0: 0.3}
    assert interpolate(table, 3.0) == pytest.approx(0.2)
    assert (interpolate(table, 1.0), interpolate(table, 30.0), interpolate(table, None)) == (0.1, 0.3, 0.3)
    with pytest.raises(MissingCost):
        interpolate({}, 3.0)


def test_measure_on_tiny_lm():
    from as2d_core.decode.options import DecodeOptions
    from tiny_lm import ScriptedSource, TinyLM

    # 20 pieces a job, not 40: the measurement times each drafter's whole jobs many times over (40 pieces: 38 s)
    source = ScriptedSource([3, 4, 5, 6] * 5, delays=[0.0005] * 20)
    other = ScriptedSource([3, 4] * 10, delays=[0.001] * 20, name="other")
    audio = np.random.default_rng(0).normal(0, 0.1, 3200).astype(np.float32)
    body = Measurement(TinyLM(), {"scripted": source, "other": other}, audio, "en",
                       DecodeOptions(budget=3, publication_size=4), kmax=4, offsets=(0, 3), repeats=2, warmup=1,
                       decodes=1, niceness=(0, 5), lengths=(0.05, 0.1, 0.15, 0.2, 0.25, 0.3), job_repeats=1,
                       rounds=2).run()
    assert sorted(body["prepare_s"]["alone"]) == ["0.05", "0.1", "0.15", "0.25", "0.3"]  # five spread over six
    assert body["prepare_s"]["detect_extra"] >= 0 and set(body["prepare_s"]["line"]) == {"intercept", "slope"}
    for condition in ("alone", "shared"):
        assert sorted(body["verify_s"][condition], key=int) == ["1", "2", "3", "4"]
        assert all(s["n"] == 4 and s["median"] > 0 for s in body["verify_s"][condition].values())
    for name, step in (("scripted", 0.0005), ("other", 0.001)):
        drafter = body["drafters"][name]
        assert drafter["piece_s"]["next"] >= step * 0.9 and drafter["piece_s"]["pieces"] == 120
        assert len(drafter["prepare_s"]) == 6 and sorted(drafter["niceness"]) == ["0", "5"]
        for measured in drafter["niceness"].values():
            assert set(measured["verify_s"]) == {"1", "2", "3", "4"}
            assert measured["target_slowdown"]["prepare"] > 0 and measured["drafter_slowdown"]["verify"] > 0
    assert body["draft_step_s"]["alone"] > 0 and body["publish_s"]["n"] > 0
    assert body["loop_s"]["median"] >= 0 and "loop_shared_s" in body
    costs = costs_of({"format": "as2d-profile/1", "source": {"name": "scripted"}, **body})
    assert costs.prepare(0.15) > 0 and costs.feasible_budget(3, source="other", niceness=5)
    assert not costs.feasible_budget(4, source="other")
    assert costs.drafter("other").piece(1, 1) >= 0.0009 and costs.drafter("unknown") is None
    # the real decodes' steps set the level of every verification price, the sweep its shape across widths
    real, scale = body["real_calls_s"]["target-only"]["1"]["median"], body["sweep_scale"]
    assert scale == pytest.approx(real / body["verify_s"]["alone"]["1"]["median"])
    assert costs.verify(1, alone=True) == pytest.approx(real)
    beside = body["drafters"]["other"]["niceness"]["5"]["verify_s"]["2"]["median"]
    assert costs.verify(2, alone=False, contention=costs.drafter("other").at(5)) == pytest.approx(beside * scale)
    # each drafter's slowdowns in the engine's own decodes, at the configured niceness, preferred by the replay
    for name in ("scripted", "other"):
        episodes = body["drafters"][name]["niceness"]["0"]["episodes"]
        assert episodes["decodes"] == 1 and episodes["target_slowdown"]["prepare"] > 0
        assert costs.drafter(name).at(0).target_prepare == episodes["target_slowdown"]["prepare"]
        assert "episodes" not in body["drafters"][name]["niceness"]["5"]


def _profile_made_here() -> dict:
    from as2d_bench.machine import bench_machine
    from as2d_tuning.versions import CODE_PACKAGES, code_version

    return {"machine": bench_machine(), "code": code_version(CODE_PACKAGES)}


def test_staleness_names_another_machine_and_other_code():
    here = _profile_made_here()
    assert staleness(here) == ([], True)
    elsewhere = dict(here, machine=dict(here["machine"], cpu="Qualcomm SM8650", cores=8))
    warnings, same = staleness(elsewhere)
    assert not same and "another machine (Qualcomm SM8650, 8 cores)" in warnings[0]
    stale = dict(here, code=dict(here["code"], sha256_16="0" * 16))
    assert "made by other code" in staleness(stale)[0][0]
    assert "does not say which code" in staleness({"machine": here["machine"]})[0][0]


@pytest.mark.parametrize("name", ["redmi-k70-pro.json", "xiaomi-11-pro.json", "xiaomi-14.json",
                                  "redmi-note-9-pro.json"])
def test_phone_profiles_load_and_say_what_is_missing(name):
    data = load_profile(PROFILES / name)
    assert data["measured"] and data["missing"]
    assert data["machine"]["model_id"]
    costs_of(data)


def test_k70_profile_has_the_papers_numbers():
    costs = costs_of(load_profile(PROFILES / "redmi-k70-pro.json"))
    assert costs.verify(1, alone=True) == pytest.approx(0.059391)
    assert costs.verify(8, alone=True) == pytest.approx(0.112656)
    assert costs.draft_step() == pytest.approx(0.023347)
    assert costs.loop == pytest.approx(0.010738)
    assert costs.feasible_budget(7) and not costs.feasible_budget(8)
    with pytest.raises(MissingCost):
        costs.verify(9, alone=True)


def test_this_machines_profile_if_present():
    path = PROFILES / "this-machine.json"
    if not path.exists():
        pytest.skip("no profile of this machine yet")
    data = json.loads(path.read_text())
    assert data["machine"]["cores"] >= 1 and data["packages"]
    assert costs_of(data).feasible_budget(7)
