"""The tuning loop on the repository's real clips with the real Whisper models: profile, bench with traces,
replay on both clocks, select; and its errors. Timings are never asserted here (BENCHMARKS.md section 10
measures how well replay and selection do); only that the pieces fit together."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import full_only

# The whole loop on real models takes a profile and a bench first (40 s): the full run's. The default run checks
# each piece on its own (test_profile, test_replay, test_select, on Ray too).
pytestmark = full_only

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
CONFIG = ROOT / "configs" / "whisper-asr-ct2.toml"
DEV, TEST = ("cmu_cards_en_w00", "librivox_sense_en_w01"), ("cmu_cards_en_w01",)
# The smallest protocol that still measures every part: one width sweep at one offset, two audio lengths, one niceness.
QUICK = ["--kmax", "8", "--offsets", "0", "--repeats", "1", "--warmup", "0", "--decodes", "1", "--lengths", "2,6",
         "--job-repeats", "1", "--rounds", "1", "--nice", "0", "--quiet"]


def _manifest(path: Path, ids) -> Path:
    rows = {r["id"]: r for r in map(json.loads, (DATA / "windows.jsonl").read_text().splitlines())}
    path.write_text("".join(json.dumps(dict(rows[i], path=str(DATA / rows[i]["path"]))) + "\n" for i in ids))
    return path


def _invoke(command, args):
    out = CliRunner().invoke(command, [str(a) for a in args])
    assert "Traceback" not in out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    """One profile and one bench with traces, shared by the checks below."""
    from as2d_bench.cli import bench
    from as2d_tuning.profile_command import profile

    tmp = tmp_path_factory.mktemp("loop")
    made = _invoke(profile, ["--config", CONFIG, "--out", tmp / "p.json", "--audio", DATA / "windows" /
                             "cmu_cards_en_w00.wav", *QUICK])
    assert made.exit_code == 0, made.stdout + made.stderr
    (tmp / "profile.out").write_text(made.stdout)
    dev, test = _manifest(tmp / "dev.jsonl", DEV), _manifest(tmp / "test.jsonl", TEST)
    both = _manifest(tmp / "all.jsonl", DEV + TEST)
    ran = _invoke(bench, [both, "--config", CONFIG, "--save-traces", "--out", tmp / "bench"])
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    return tmp, dev, test


def test_the_profile_measures_what_the_engine_does(loop):
    from as2d_tuning.costs import costs_of, load_profile

    tmp, _, _ = loop
    data = load_profile(tmp / "p.json")
    assert data["duration_s"] > 0 and data["code"]["sha256_16"] and data["models"]["sources"]
    assert data["protocol"]["audio"] == ["cmu_cards_en_w00.wav"]  # what it calibrated on
    drafter = data["drafters"]["whisper-tiny.en-ct2"]
    assert drafter["piece_s"]["tokens"] > 0 and set(drafter["prepare_s"]) == {"2", "6"}
    assert set(drafter["niceness"]) == {"0"} and set(drafter["niceness"]["0"]["verify_s"]) == {str(k) for k in range(1, 9)}
    assert set(data["prepare_s"]["alone"]) == {"2", "6"} and "detect_extra" in data["prepare_s"]
    costs = costs_of(data)
    assert costs.feasible_budget(7, source="whisper-tiny.en-ct2") and not costs.feasible_budget(8)
    waves = data["batch_s"]["waves_e2e_s"]  # whole waves of the calibration request, each way: they price the waves
    assert set(waves) == {"2", "4", "8"} and all(min(clock.values()) > 0 for clock in waves.values())
    printed = (tmp / "profile.out").read_text()
    assert "rows at once, as2d / target-only" in printed and f"up to {data['batch_s']['speculate_rows']} row" in printed


def test_replay_prices_both_clocks_of_the_bench(loop):
    from as2d_tuning.replay_command import replay
    from as2d_tuning.versions import code_version

    tmp, _, _ = loop
    out = _invoke(replay, [tmp / "bench", "--profile", tmp / "p.json", "--out", tmp / "replay"])
    assert out.exit_code == 0, out.stdout + out.stderr
    assert "another machine" not in out.stderr and "another whisper" not in out.stderr  # made here, on these models
    code = json.loads((tmp / "p.json").read_text())["code"]
    if code_version(code["packages"]) == code:  # (a tree edited meanwhile is other code: the warning is right)
        assert "Warning" not in out.stderr
    summary = json.loads((tmp / "replay" / "summary.json").read_text())
    for method in ("target-only", "as2d"):
        stats = summary["methods"][method]
        assert stats["exact_windows"] == stats["windows"] == 3
        assert stats["replay_mae_pct"] >= 0 and stats["replay_e2e_mae_pct"] >= 0 and stats["pooled_e2e_tps"] > 0
    rows = [json.loads(line) for line in (tmp / "replay" / "results.jsonl").read_text().splitlines()]
    assert all(r["e2e_s"] == pytest.approx(r["prepare_s"] + r["decode_s"]) for r in rows)
    assert {r["start"] for r in rows if r["method"] == "as2d"} == {"arrival"}
    calibrated = _invoke(replay, [tmp / "bench", "--profile", tmp / "p.json", "--out", tmp / "replay-cal",
                                  "--load-calibrate"])
    assert calibrated.exit_code == 0, calibrated.stdout + calibrated.stderr
    stats = json.loads((tmp / "replay-cal" / "summary.json").read_text())["methods"]["target-only"]
    assert stats["replay_mae_pct"] < 1e-6 and stats["replay_e2e_mae_pct"] < 1e-6  # calibrated on itself


def test_replay_warns_of_a_profile_from_elsewhere(loop):
    from as2d_tuning.replay_command import replay

    tmp, _, _ = loop
    data = json.loads((tmp / "p.json").read_text())
    data["machine"]["cpu"], data["code"]["sha256_16"] = "Qualcomm SM8650", "0" * 16
    (tmp / "elsewhere.json").write_text(json.dumps(data))
    out = _invoke(replay, [tmp / "bench", "--profile", tmp / "elsewhere.json", "--out", tmp / "replay-elsewhere"])
    assert out.exit_code == 0, out.stdout + out.stderr
    assert "another machine (Qualcomm SM8650" in out.stderr and "made by other code" in out.stderr
    assert "native" not in json.loads((tmp / "replay-elsewhere" / "summary.json").read_text())


def test_select_chooses_on_the_users_clock(loop):
    from as2d_core.setup.config import check_file
    from as2d_tuning.select_command import select

    tmp, dev, test = loop
    args = [dev, "--test", test, "--profile", tmp / "p.json", "--sources", "whisper-tiny.en-ct2", "--budgets", "1-7",
            "--config", CONFIG, "--traces", tmp / "bench", "--out", tmp / "selected.toml", "--json"]
    out = _invoke(select, args)
    assert out.exit_code == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["clock"] == "e2e" and report["gap_pct"] >= -1e-9
    assert report["selected"]["start"] in ("arrival", "prepared") and report["selected"]["niceness"] == 0
    config = check_file(tmp / "selected.toml")
    assert config.ok, config.errors
    assert config.config.decode.start == report["selected"]["start"]
    if "batch_s" in json.loads((tmp / "p.json").read_text()):  # the server's threshold: the replay's tokens a call
        from as2d_core.decode.profile import read_profile
        from as2d_core.decode.scheduler import speculate_rows_from

        priced = read_profile(config.config.decode.profile)
        assert Path(config.config.decode.profile).name == "profile.json" and report["batch"]["tokens_per_call"] > 1
        assert speculate_rows_from(priced) == report["batch"]["speculate_rows"]
        clocks = priced["batch_s"]["alone_e2e_s"]  # the real decodes, arrival to last token: does drafting pay alone
        assert set(clocks) == {"as2d", "target-only"} and all(seconds > 0 for seconds in clocks.values())
    decode = _invoke(select, [*args[:-3], "--out", tmp / "decode.toml", "--clock", "decode", "--json"])
    assert decode.exit_code == 0 and json.loads(decode.stdout)["clock"] == "decode"


def test_select_without_config_takes_the_defaults_a_profile_without_config_measured(loop, tmp_path):
    """``as2d profile`` without --config measures ``as2d run``'s parts; select on such a profile needs no --config."""
    from as2d_core.setup.build import DEFAULT_TARGET
    from as2d_core.setup.config import check_file
    from as2d_tuning.select_command import select

    tmp, dev, test = loop
    data = json.loads((tmp / "p.json").read_text())
    (tmp_path / "p.json").write_text(json.dumps(dict(data, config="<command line>")))
    out = _invoke(select, [dev, "--test", test, "--profile", tmp_path / "p.json", "--sources", "whisper-tiny.en-ct2",
                           "--budgets", "1-3", "--traces", tmp / "bench", "--out", tmp_path / "s.toml", "--json"])
    assert out.exit_code == 0, out.stdout + out.stderr
    assert check_file(tmp_path / "s.toml").config.target.model == DEFAULT_TARGET
    missing = _invoke(select, [dev, "--test", test, "--profile", tmp_path / "p.json", "--sources", "whisper-tiny.en-ct2",
                               "--config", tmp_path / "absent.toml", "--traces", tmp / "bench", "--out", tmp_path / "t.toml"])
    assert missing.exit_code != 0 and "absent.toml" in missing.stdout + missing.stderr


def test_errors_are_one_line(loop, tmp_path):
    from as2d_tuning.profile_command import profile
    from as2d_tuning.replay_command import replay
    from as2d_tuning.select_command import select

    tmp, dev, test = loop
    cases = [
        (profile, ["--config", CONFIG, "--out", tmp_path / "p.json", "--lengths", "0,5"], "--lengths must be positive"),
        (profile, ["--config", CONFIG, "--out", tmp_path / "p.json", "--nice", "30"], "between 0 and 19"),
        (profile, ["--config", CONFIG, "--out", tmp_path / "p.json", "--audio", CONFIG], "Error:"),
        (replay, [tmp / "bench", "--profile", CONFIG, "--out", tmp_path / "r"], "Error:"),
        (select, [dev, "--test", test, "--profile", ROOT / "profiles" / "redmi-k70-pro.json", "--sources",
                  "whisper-tiny.en-ct2", "--config", CONFIG, "--traces", tmp / "bench", "--out", tmp_path / "s.toml"],
         "no preparation costs"),
        (select, [dev, "--test", test, "--profile", tmp / "p.json", "--sources", "pocketsphinx", "--config", CONFIG,
                  "--traces", tmp / "bench", "--out", tmp_path / "s.toml"], "no as2d trace of pocketsphinx"),
    ]
    for command, args, message in cases:
        out = _invoke(command, args)
        assert out.exit_code == 2 and message in out.stderr, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
