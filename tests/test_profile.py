"""Device profiles: measurement on the contracts (TinyLM), R(K), and the paper's phone files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from as2d_tuning.costs import MissingCost, costs_of, load_profile
from as2d_tuning.profile import measure, r_of_k, stat

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


def test_stat_and_r_of_k_by_hand():
    s = stat([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["n"], s["min"], s["max"]) == (3.0, 5, 1.0, 5.0)
    verify = {"1": {"median": 10, "mean": 10, "stdev": 1}, "4": {"median": 20, "mean": 20, "stdev": 4}}
    r = r_of_k(verify)
    assert r["1"]["r_pct"] == pytest.approx(0.0)
    assert r["4"]["r_pct"] == pytest.approx(50.0)  # 1 - 20 / (4 x 10)
    assert r["4"]["err_pct"] == pytest.approx(10.0)  # 100 x 4 / (4 x 10)


def test_measure_on_tiny_lm(tiny_request):
    from as2d_core import DecodeOptions
    from tiny_lm import ScriptedSource, TinyLM

    target = TinyLM()
    source = ScriptedSource([3, 4, 5, 6] * 10, delays=[0.0005] * 40)
    other = ScriptedSource([3, 4] * 20, delays=[0.001] * 40, name="other")
    body = measure(target, source, tiny_request(1), options=DecodeOptions(budget=3, publication_size=4), kmax=4,
                   offsets=(0, 3), repeats=2, warmup=1, decodes=1, other_sources={"other": other})
    assert body["drafters"]["other"]["draft_step_s"]["alone"]["median"] >= 0.001
    for condition in ("alone", "shared"):
        assert sorted(body["verify_s"][condition], key=int) == ["1", "2", "3", "4"]
        assert all(s["n"] == 4 and s["median"] > 0 for s in body["verify_s"][condition].values())
    assert body["draft_step_s"]["alone"]["median"] > 0 and body["publish_s"]["n"] > 0
    assert body["loop_s"]["median"] >= 0 and "loop_shared_s" in body
    assert set(body["slowdown"]["verify_shared_over_alone"]) == {"1", "2", "3", "4"}
    costs = costs_of({"format": "as2d-profile/1", "source": {"name": "scripted"}, **body})
    assert costs.feasible_budget(3) and not costs.feasible_budget(4)
    assert costs.for_source("other").draft_step() >= 0.001 and costs.for_source("unknown") is None


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


class _ChunkySource:
    """A drafter whose pieces carry several tokens each, as a native whole-decode call gives them."""

    name, vocabulary, languages, eos_token = "chunky", "tiny", frozenset({"en"}), 1

    def __init__(self, pieces: int, size: int = 4, sleep_s: float = 0.008):
        self.count, self.size, self.sleep_s = pieces, size, sleep_s

    def decode_text(self, tokens):
        return " ".join(f"t{t}" for t in tokens)

    def prepare(self, request, language, threads):
        source = self

        class Job:
            ended_with_eos = True

            def pieces(self):
                from as2d_core.contracts import DraftPiece
                import time

                for i in range(source.count):
                    time.sleep(source.sleep_s)
                    yield DraftPiece(tokens=tuple(range(3 + i * source.size, 3 + (i + 1) * source.size)), boundary=True)

            def close(self):
                pass

        return Job()


def test_draft_steps_price_a_token_not_a_piece(tiny_request):
    """A 4-token piece that took 8 ms is 2 ms per token; a drafter with one piece per job cannot loop forever."""
    from tiny_lm import TinyLM

    from as2d_tuning.profile import _draft_steps

    target = TinyLM()
    request = tiny_request(2)
    session = target.prepare(request, threads=1)
    try:
        times = _draft_steps(_ChunkySource(pieces=3), session, target, request, "en", 1, count=12)
        assert len(times) >= 5 and all(t >= 0.002 for t in times)  # 8 ms sleeps over 4 tokens each
        assert _draft_steps(_ChunkySource(pieces=1), session, target, request, "en", 1, count=12) == []
    finally:
        session.close()
