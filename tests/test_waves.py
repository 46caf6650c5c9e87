"""Whole files pick their route (``batch_windows = "auto"``): the wave size and whether the windows draft, priced
from the device profile's batch costs (``scheduler.wave_prices``), else the default rule (waves of 4, drafting).

The pricing is a pure function, checked on costs made up for the purpose (one window, a profile without batch
costs, drafting that never pays and that always pays, a wave the profile did not measure); the choice around it
on the options; ``as2d run --route windows --json --check`` on 39 s of the bundled clip reports the route it took
and stays exact, by the default rule and by a profile where drafting never pays.
"""
from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
import soundfile
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from as2d_core.cli.main import cli
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.profile import FORMAT, NotAProfile, read_profile
from as2d_core.decode.scheduler import (DEFAULT_WAVE_SIZE, WavePrice, drafting_pays_in_waves,
                                         speculate_rows_from, wave_prices)
from as2d_core.input.waves import UNPRICED, choose_waves
from as2d_core.setup.build import resolve_config
from as2d_core.setup.config import check_file
from conftest import full_only

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "examples" / "ljspeech_en_w00.wav"
NO_DRAFTING = REPO / "tests" / "fixtures" / "profile-no-drafting.json"
COSTS = {1: (0.010, 0.012), 2: (0.012, 0.015), 4: (0.016, 0.022), 8: (0.024, 0.040)}  # rows -> (1 wide, 4 wide) s


def _profile(costs: dict[int, tuple[float, float]], tokens_per_call: float, slowdown: float = 1.0) -> dict:
    rows = {str(b): {"1": {"median": one}, "4": {"median": wide}} for b, (one, wide) in costs.items()}
    return {"format": FORMAT, "batch_s": {"width": 4, "tokens_per_call": tokens_per_call, "rows": rows},
            "slowdown": {"verify_shared_over_alone": {"4": slowdown}}}


def _best(profile: dict, windows: int, can_draft: bool = True) -> tuple[int, bool]:
    best = wave_prices(profile, windows, can_draft)[0]
    return best.size, best.drafts


def test_drafting_that_always_pays_drafts_in_the_widest_wave_that_pays():
    profile = _profile(COSTS, 3.0)  # a drafting row commits 3 tokens a call; a 4-wide call costs < 3 narrow ones
    assert _best(profile, 8) == (8, True)  # 0.040 / (8 * 3) s a token, the cheapest
    assert wave_prices(profile, 8)[0] == WavePrice(8, True, pytest.approx(0.040 / 24))
    # 5 windows: a wave of 5 is priced as one of 8 (not measured: the next size up); 4 then 1 is cheaper
    assert _best(profile, 5) == (4, True)
    assert wave_prices(profile, 5)[0].seconds_per_token == pytest.approx((0.022 + 0.012) / (5 * 3))
    assert _best(profile, 8, can_draft=False) == (8, False)  # target-only methods choose the size alone


def test_drafting_that_never_pays_runs_the_widest_target_only_waves():
    profile = _profile(COSTS, 1.0)  # a drafting row commits 1 token a call, as target-only, on a wider call
    assert _best(profile, 20) == (8, False)
    by = {(p.size, p.drafts): p.seconds_per_token for p in wave_prices(profile, 20)}
    assert all(by[(b, True)] > by[(b, False)] for b in (1, 2, 4, 8))  # at every size, drafting costs more


def test_one_window_has_one_wave_and_drafts_where_it_pays_alone():
    assert {p.size for p in wave_prices(_profile(COSTS, 3.0), 1)} == {1}
    assert _best(_profile(COSTS, 3.0), 1) == (1, True)
    assert _best(_profile(COSTS, 1.0), 1) == (1, False)
    assert _best(_profile(COSTS, 3.0), 0) == (1, True)  # no window at all: priced as one


def test_the_batch_sections_own_slowdown_comes_first():
    profile = _profile(COSTS, 3.0, slowdown=1.0)
    profile["batch_s"]["verify_slowdown"] = 2.0  # measured with the batches: the profile's own is older
    assert wave_prices(profile, 1)[0] == WavePrice(1, True, pytest.approx(0.012 * 2.0 / 3))


def test_a_profile_without_batch_costs_prices_nothing():
    assert wave_prices({"format": FORMAT, "verify_s": {}}, 8) is None
    assert wave_prices({"batch_s": {"width": 4, "rows": {}, "tokens_per_call": 2.0}}, 8) is None
    with pytest.raises(ValueError, match="batch_s"):  # there, but not as `as2d profile` writes it
        wave_prices({"batch_s": {"width": 4, "tokens_per_call": 2.0, "rows": {"2": {"1": {}}}}}, 8)


@settings(max_examples=40, deadline=None)
@given(ones=st.lists(st.floats(0.005, 0.05), min_size=4, max_size=4),
       ratios=st.lists(st.floats(1.0, 4.0), min_size=4, max_size=4),
       tokens_per_call=st.floats(1.0, 5.0), slowdown=st.floats(1.0, 2.0))
# a tie (a call 1.25 times as dear committing 1.25 times the tokens) that the two rules once rounded apart
@example(ones=[0.005, 0.03125, 0.03125, 0.03125], ratios=[2.0, 2.0, 2.0, 1.25], tokens_per_call=1.25, slowdown=1.0)
def test_at_each_wave_size_drafting_wins_exactly_where_the_servers_rule_says_it_pays(ones, ratios, tokens_per_call,
                                                                                     slowdown):
    """One reading of the profile for both rules: at a batch of B, drafting is the cheaper way iff B is at most
    ``speculate_rows_from``'s threshold (while the ratio of a wide call to a narrow one grows with B)."""
    ratios = sorted(ratios)
    costs = {b: (one, one * r) for b, one, r in zip((1, 2, 4, 8), ones, ratios)}
    profile = _profile(costs, tokens_per_call, slowdown)
    by = {(p.size, p.drafts): p.seconds_per_token for p in wave_prices(profile, 8)}
    threshold = speculate_rows_from(profile)
    for b in (1, 2, 4, 8):
        assert (by[(b, True)] < by[(b, False)]) == (b <= threshold), (b, threshold)
    best = min(by.values())
    assert wave_prices(profile, 8)[0].seconds_per_token == best


def test_the_choice_an_explicit_size_the_default_rule_and_what_keeps_windows_apart():
    auto = DecodeOptions(route="windows")
    assert auto.batch_windows == "auto"
    rule = choose_waves(auto, "as2d", True, 9, None)
    assert (rule.size, rule.drafts, rule.why) == (DEFAULT_WAVE_SIZE, True, f"default rule ({UNPRICED})")
    assert choose_waves(auto, "as2d", True, 2, None).size == 2  # capped by the file's windows
    assert choose_waves(auto, "target-only", False, 9, None).drafts is False
    old = DecodeOptions(route="windows", profile="old.json")
    assert choose_waves(old, "as2d", True, 9, {"format": FORMAT}).why == "default rule (old.json has no batch costs, " \
                                                                           "batch_s)"
    priced = DecodeOptions(route="windows", profile="p.json")
    chosen = choose_waves(priced, "as2d", True, 8, _profile(COSTS, 1.0))
    assert (chosen.size, chosen.drafts, chosen.why, chosen.method("as2d")) == (8, False, "profile p.json", "target-only")
    assert chosen.as_dict() == {"route": "windows", "wave_size": 8, "drafts": False, "why": "profile p.json",
                                "priced_s_per_token": pytest.approx(0.003)}
    explicit = choose_waves(DecodeOptions(batch_windows=2, profile="p.json"), "as2d", True, 8, _profile(COSTS, 1.0))
    assert (explicit.size, explicit.drafts, explicit.why) == (  # a number sets the size; the profile, the drafting
        2, False, "batch_windows 2; target-only: profile p.json prices drafting in waves of 2 above target-only")
    explicit = choose_waves(DecodeOptions(batch_windows=2), "as2d", True, 8, _profile(COSTS, 3.0))
    assert (explicit.size, explicit.drafts, explicit.why) == (2, True, "batch_windows 2")
    assert choose_waves(DecodeOptions(batch_windows=2), "as2d", True, 8, None).drafts is True  # unpriced: the method
    apart = choose_waves(auto, "as2d", True, 8, None, "each window is conditioned on the text before it")
    assert (apart.size, apart.drafts) == (1, True) and apart.why.endswith("conditioned on the text before it")
    assert choose_waves(auto, "sd-k5", True, 8, None).size == 1  # a serial baseline takes turns with the target


def _timed(clocks: dict[int, tuple[float, float]], tokens: int = 100) -> dict:
    """A profile with whole waves timed: B -> (as2d s, target-only s), a wave of B rows of ``tokens`` tokens each;
    its calls (``COSTS`` at 3 tokens a call) say drafting always pays, so what it prices comes from the waves."""
    profile = _profile(COSTS, 3.0)
    profile["batch_s"].update(waves_e2e_s={str(b): {"as2d": a, "target-only": t} for b, (a, t) in clocks.items()
                                           if b > 1},
                              wave_row_tokens=tokens, alone_e2e_s={"as2d": clocks[1][0], "target-only": clocks[1][1]})
    return profile


WAVES = {1: (1.0, 1.2), 2: (1.3, 1.5), 4: (2.2, 2.1), 8: (4.4, 3.8)}  # drafting ends sooner alone and in pairs only


def test_whole_waves_timed_price_the_waves_before_the_calls():
    """The drafters' encoding and their share of the cores are in a timed wave, not in the calls: where the profile
    timed waves, they price the route, the user's wave size and the server's rule."""
    profile = _timed(WAVES)
    assert speculate_rows_from(profile) == 2 and speculate_rows_from(_profile(COSTS, 3.0)) == 8
    assert wave_prices(profile, 8)[0] == WavePrice(8, False, pytest.approx(3.8 / 800))
    assert _best(profile, 2) == (2, True)
    # 11 windows: a wave of 8, then one of 3, priced as a wave of 4 over 3 rows' tokens
    assert wave_prices(profile, 11)[0] == WavePrice(8, False, pytest.approx((8 * 3.8 / 800 + 3 * 2.1 / 300) / 11))
    assert drafting_pays_in_waves(profile, 2, 11) is True and drafting_pays_in_waves(profile, 8, 11) is False
    assert drafting_pays_in_waves({"format": FORMAT}, 8, 11) is None
    user = choose_waves(DecodeOptions(batch_windows=8, profile="p.json"), "as2d", True, 11, profile)
    assert (user.size, user.drafts, user.method("as2d")) == (8, False, "target-only")
    assert choose_waves(DecodeOptions(batch_windows=2, profile="p.json"), "as2d", True, 11, profile).drafts is True
    auto = choose_waves(DecodeOptions(route="windows", profile="p.json"), "as2d", True, 11, profile)
    assert (auto.size, auto.drafts) == (8, False)
    broken = _timed(WAVES)
    broken["batch_s"]["waves_e2e_s"]["2"] = {"as2d": 1.0}
    with pytest.raises(ValueError, match="waves_e2e_s"):
        wave_prices(broken, 8)


@settings(max_examples=40, deadline=None)
@given(target_only=st.lists(st.floats(0.5, 10.0), min_size=4, max_size=4),
       ratios=st.lists(st.floats(0.5, 2.0), min_size=4, max_size=4))
def test_with_timed_waves_both_rules_still_agree_at_each_size(target_only, ratios):
    """Drafting is the cheaper way at B exactly where the server's rule says it pays, while drafting's share of a
    wave's clock grows with B (the cores fill)."""
    clocks = {b: (t * r, t) for b, t, r in zip((1, 2, 4, 8), target_only, sorted(ratios))}
    profile = _timed(clocks)
    by = {(p.size, p.drafts): p.seconds_per_token for p in wave_prices(profile, 8)}
    threshold = speculate_rows_from(profile)
    for b in (1, 2, 4, 8):
        if (b, True) in by:  # drafting that loses alone is not priced in any wave
            assert (by[(b, True)] < by[(b, False)]) == (b <= threshold), (b, threshold)
        else:
            assert threshold == 0


@pytest.mark.parametrize("value", [0, 17, -1, "many", 2.5, True])
def test_a_wave_size_is_auto_or_a_whole_number_from_1_to_16(value):
    with pytest.raises(ValueError, match="batch_windows must be auto or a whole number from 1 to 16"):
        DecodeOptions(batch_windows=value)
    assert DecodeOptions(batch_windows="4").batch_windows == 4 and DecodeOptions(batch_windows="AUTO").batch_windows \
        == "auto"


def test_a_file_that_is_no_profile_is_refused_in_one_line(tmp_path):
    assert read_profile(NO_DRAFTING)["batch_s"]["tokens_per_call"] == 1.0
    notes = tmp_path / "notes.txt"
    notes.write_text("not a profile")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else"}))
    for path, words in ((notes, "not an as2d device profile"), (other, "format 'something-else'"),
                        (tmp_path / "absent.json", "cannot read")):
        with pytest.raises(NotAProfile, match=words):
            read_profile(path)
    result = CliRunner().invoke(cli, ["run", str(BUNDLED), "--route", "windows", "--profile", str(notes)])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and result.output.count("\n") == 1
    assert "not an as2d device profile" in result.output
    result = CliRunner().invoke(cli, ["run", str(BUNDLED), "--batch-windows", "0"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "batch_windows must be auto" in result.output


def test_a_configuration_with_a_wave_size_out_of_range_is_invalid(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('batch_windows = 0\nmethod = "target-only"\n[target]\nmodel = "whisper-base"\n')
    report = check_file(config)
    assert not report.ok and any("batch_windows must be auto or a whole number" in e for e in report.errors)


def test_a_configuration_names_its_profile_from_its_own_folder(tmp_path):
    folder = tmp_path / "task"
    folder.mkdir()
    config = folder / "asr.toml"
    config.write_text('profile = "machine.json"\nmethod = "target-only"\n[target]\nmodel = "whisper-base"\n')
    resolved, _report = resolve_config(config, {}, {})
    assert resolved.decode.profile == str(folder / "machine.json")
    resolved, _report = resolve_config(config, {"profile": "here.json"}, {})  # --profile: the current folder's
    assert resolved.decode.profile == "here.json"


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> Path:
    """39 s of the bundled clip: two windows, cut at pauses."""
    speech, rate = soundfile.read(BUNDLED, dtype="float32")
    path = tmp_path_factory.mktemp("waves") / "long.wav"
    soundfile.write(path, np.concatenate([speech[: 12 * rate], np.zeros(rate, np.float32)] * 3), rate)
    return path


SEEK_WHY = "Whisper's long form: each request starts where the one before ended"


@pytest.mark.parametrize("profile, route", [
    (None, {"route": "windows", "wave_size": 2, "drafts": True, "why": f"default rule ({UNPRICED})"}),
    pytest.param(NO_DRAFTING, {"route": "windows", "wave_size": 2, "drafts": False, "why": f"profile {NO_DRAFTING}"},
                 marks=full_only),  # the pricing rule: the property test below; a priced file: the auto profile's test
    pytest.param(NO_DRAFTING, {"route": "seek", "wave_size": 1, "drafts": False, "why": f"{SEEK_WHY}; target-only: "
                 f"profile {NO_DRAFTING} prices drafting above decoding alone on this device"},
                 marks=full_only),  # test_whisper_model and the auto profile's test below price the seek route too
], ids=["windows-default", "windows-priced", "seek-priced"])
def test_as2d_run_says_which_route_it_took_and_stays_exact(long_file, profile, route):
    """The seek route decodes one request at a time: it drafts unless the profile prices drafting alone above
    target-only decoding (drafting that always pays is the seek route's default, tested in test_long_form)."""
    flags = ["--profile", str(profile)] if profile else []
    if route["route"] == "seek":  # the file repeats one clip: its text would send every request through the fallback
        flags += ["--temperature", "0"]
    result = CliRunner().invoke(cli, ["run", str(long_file), "--route", route["route"], "--language", "en", "--json",
                                      "--check", "--quiet", *flags])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    taken = {k: v for k, v in out["route"].items() if k != "priced_s_per_token"}
    assert taken == route and len(out["windows"]) >= 2
    assert out["exact"] is True and all(w["exact"] for w in out["windows"])
    assert out["method"] == ("as2d" if route["drafts"] else "target-only")
    assert "printing" in out["text"].lower()


def _machine_profile(folder: Path, kind: str, target: str, source: str | None, created: str, name: str) -> Path:
    """The no-drafting fixture as a profile of ``target`` and ``source`` made on a machine of ``kind``."""
    data = read_profile(NO_DRAFTING)
    data.update(machine={"cpu": "?", "kind": kind}, target={"model": target}, source={"name": source}, created=created)
    path = folder / name
    path.write_text(json.dumps(data))
    return path


def test_auto_reads_this_machines_newest_profile_of_the_pair(tmp_path, monkeypatch):
    """``profile = "auto"`` (the default): a profile of the same target and drafter made on a machine of this kind,
    the newest; another kind (here: other vector instructions), another pair or a file that is no profile is not
    read; "none" and None read none; a path is itself."""
    from as2d_core.decode.profile import machine_profile_file, profile_path, this_machine, vector_isa

    assert vector_isa({"fpu", "avx", "avx2", "avx512f"}) == "avx512" and vector_isa({"avx", "avx2"}) == "avx2"
    assert vector_isa({"fp", "asimd", "sve"}) == "sve" and vector_isa({"fpu"}) == ""
    monkeypatch.setenv("AS2D_PROFILES_DIR", str(tmp_path))
    kind = this_machine()["kind"]
    assert kind.endswith(this_machine()["isa"]) and profile_path("auto", "whisper-base", "tiny") is None
    (tmp_path / "notes.json").write_text("{}")
    _machine_profile(tmp_path, kind.rsplit(" ", 1)[0] + " other-isa", "whisper-base", "tiny", "2026-12-05", "a.json")
    _machine_profile(tmp_path, kind, "whisper-base-int8", "tiny", "2026-12-05", "b.json")
    older = _machine_profile(tmp_path, kind, "whisper-base", "tiny", "2026-12-01", "c.json")
    assert profile_path("auto", "whisper-base", "tiny") == str(older)
    assert profile_path("auto", "whisper-base", None) is None
    newer = machine_profile_file(kind, "whisper-base", "tiny")  # where `as2d profile` writes by default
    assert newer.parent == tmp_path and "whisper-base" in newer.name
    _machine_profile(tmp_path, kind, "whisper-base", "tiny", "2026-12-04", newer.name)
    assert profile_path("auto", "whisper-base", "tiny") == str(newer)
    assert profile_path("none", "whisper-base", "tiny") is None and profile_path(None, "whisper-base", "tiny") is None
    assert profile_path("mine.json", "whisper-base", "tiny") == "mine.json"


def test_beams_on_the_windows_route_run_one_window_at_a_time_and_say_they_do_not_draft():
    """Each window's one decode is beam search, which runs target-only: the route must not say it drafts."""
    from as2d_core.input.pipeline import Pipeline, PipelineOptions
    from tiny_lm import ScriptedSource, TinyLM
    from tokenizer_bridges import IdentityBridge

    beams = DecodeOptions(route="windows", beam_size=5, temperature=0, profile=None)
    pipeline = Pipeline(TinyLM(), ScriptedSource([3, 4]), PipelineOptions(decode=beams),
                        bridge=IdentityBridge.for_request)
    assert pipeline.route(3).as_dict() == {"route": "windows", "wave_size": 1, "drafts": False, "why": "default rule; "
                                           "one window at a time: beams decode their hypotheses side by side instead"}
    sampled = pipeline.evolve(decode=attrs.evolve(beams, temperature=0.2))  # sampled: the drafts are verified
    assert sampled.route(3).drafts is True


def test_a_route_that_drafts_unpriced_says_how_to_price_it_and_beams_say_they_do_not_draft():
    """Without a device profile of this machine both routes draft by their default rule, and say what measures one;
    the seek route's beams run target-only, and only the fallback's sampled rounds draft."""
    from as2d_core.input.pipeline import Pipeline, PipelineOptions
    from tiny_lm import ScriptedSource, TinyLM
    from tokenizer_bridges import IdentityBridge

    seek = Pipeline(TinyLM(), ScriptedSource([3, 4]), PipelineOptions(decode=DecodeOptions(route="seek")),
                    bridge=IdentityBridge.for_request)
    assert seek.route(1).as_dict() == {"route": "seek", "wave_size": 1, "drafts": True,
                                       "why": f"{SEEK_WHY}; drafts: {UNPRICED}"}
    alone = Pipeline(TinyLM(), None, PipelineOptions(method="target-only", decode=DecodeOptions(route="seek")))
    assert UNPRICED not in alone.route(1).why  # nothing to price
    beams = seek.evolve(decode=DecodeOptions(route="seek", beam_size=5, temperature=0))
    assert beams.route(1).as_dict() == {"route": "seek", "wave_size": 1, "drafts": False, "why": f"{SEEK_WHY}; "
                                        "target-only: beams decode their hypotheses side by side instead"}
    fallback = seek.evolve(decode=DecodeOptions(route="seek", beam_size=5))  # its sampled rounds draft
    assert fallback.route(1).drafts is True and "the fallback's sampled rounds draft" in fallback.route(1).why


def test_as2d_run_takes_this_machines_profile_by_itself(tmp_path, monkeypatch):
    """Without --profile, ``as2d run`` reads the profile ``as2d profile`` made on this machine for its pair: one that
    prices drafting above decoding alone sends the seek route target-only, a newer one that prices it below drafts,
    each run naming the file (``--profile none`` reads none: the unit test above). The tokens are the same."""
    from as2d_core.decode.profile import this_machine
    from as2d_core.setup.build import DEFAULT_SOURCE, DEFAULT_TARGET

    monkeypatch.setenv("AS2D_PROFILES_DIR", str(tmp_path))
    kind = this_machine()["kind"]

    def run(*flags: str) -> dict:
        result = CliRunner().invoke(cli, ["run", str(BUNDLED), "--language", "en", "--temperature", "0", "--json",
                                          "--check", "--quiet", *flags])
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["exact"] is True
        return out

    loses = _machine_profile(tmp_path, kind, DEFAULT_TARGET, DEFAULT_SOURCE, "2026-12-04", "loses.json")
    alone = run()
    assert alone["route"] == {"route": "seek", "wave_size": 1, "drafts": False, "why": f"{SEEK_WHY}; target-only: "
                              f"profile {loses} prices drafting above decoding alone on this device"}
    pays = _machine_profile(tmp_path, kind, DEFAULT_TARGET, DEFAULT_SOURCE, "2026-12-05", "pays.json")
    data = read_profile(pays)
    data["batch_s"].update(tokens_per_call=3.0, alone_e2e_s={"as2d": 1.0, "target-only": 1.5})
    pays.write_text(json.dumps(data))
    drafting = run()
    assert drafting["route"] == {"route": "seek", "wave_size": 1, "drafts": True, "why": f"{SEEK_WHY}; drafts: "
                                 f"profile {pays} prices drafting below decoding alone on this device"}
    assert alone["text"] == drafting["text"]
