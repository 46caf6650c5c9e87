"""The bench: summary arithmetic by hand, and a whole run on TinyLM (files, exactness, decomposition)."""
import json
import wave

import numpy as np
import pytest
from click.testing import CliRunner

from as2d_core.decode.options import DecodeOptions
from as2d_bench.runner import Bench, expand_methods, read_manifest
from as2d_bench.summary import summarize
from test_baselines import MODEL, PrefixSource
from test_config_paths import built  # noqa: F401 (a fixture: the registry with a test target and source)
from tiny_lm import SlowTarget


def _row(window, method, tokens, decode_s, exact=True, proposed=0, accepted=0, **extra):
    return {"window": window, "method": method, "tokens": tokens, "decode_s": decode_s, "tps": tokens / decode_s,
            "exact": exact, "proposed": proposed, "accepted": accepted, **extra}


def test_summary_arithmetic_by_hand():
    rows = [
        _row("a", "target-only", 10, 1.0), _row("b", "target-only", 30, 2.0),
        _row("a", "as2d", 10, 0.5, proposed=8, accepted=6), _row("b", "as2d", 30, 2.5, proposed=20, accepted=10),
        _row("a", "sd-k5", 10, 1.0, proposed=4, accepted=2), _row("b", "sd-k5", 30, 1.0, proposed=4, accepted=4),
        _row("a", "sd-k6", 10, 2.0), _row("b", "sd-k6", 30, 3.0, exact=False),
        _row("a", "sd-k7", 10, 1.0), _row("b", "sd-k7", 30, 1.0),
        _row("a", "sd-k8", 10, 1.0), _row("b", "sd-k8", 30, 1.0),
        {"window": "a", "method": "sd", "derived": True, "tokens": 10, "tps": 99.0},  # ignored by the arithmetic
        {"window": "a", "method": "hf-assisted", "tokens": 0, "decode_s": 0.0, "tps": 0.0, "error": "no model"},
    ]
    m = summarize(rows)["methods"]
    assert m["target-only"]["pooled_tps"] == pytest.approx(40 / 3)
    assert m["as2d"]["pooled_tps"] == pytest.approx(40 / 3)
    assert m["as2d"]["ratio_vs_target_only"] == pytest.approx(1.0)
    assert m["as2d"]["acceptance"] == pytest.approx(16 / 28)
    assert m["as2d"]["coverage"] == pytest.approx(16 / 40)
    assert m["as2d"]["slower_windows"] == 1  # b: 12 < 15 tok/s; a: 20 > 10
    assert m["as2d"]["exact_windows"] == 2 and m["as2d"]["windows"] == 2
    # sd: each K pooled, then the mean of the four TPS values
    assert m["sd-k6"]["pooled_tps"] == pytest.approx(8.0)
    assert m["sd"]["pooled_tps"] == pytest.approx((20 + 8 + 20 + 20) / 4)
    assert m["sd"]["exact_windows"] == 1  # sd-k6 differs on b
    # per window: a = mean(10, 5, 10, 10) = 8.75 < 10 (slower), b = mean(30, 10, 30, 30) = 25 > 15
    assert m["sd"]["slower_windows"] == 1
    assert m["sd"]["acceptance"] is None  # sd-k6..k8 proposed nothing
    assert m["target-only"]["slower_windows"] == 0
    assert m["hf-assisted"]["failed_windows"] == 1 and m["hf-assisted"]["windows"] == 0


def test_expand_methods():
    assert expand_methods(["as2d", "sd"]) == ["target-only", "as2d", "sd-k5", "sd-k6", "sd-k7", "sd-k8"]
    with pytest.raises(ValueError, match="unknown methods"):
        expand_methods(["nope"])


def _write_wav(path, seed):
    samples = (np.random.default_rng(seed).normal(0, 0.1, 1600) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes(samples.tobytes())


@pytest.fixture
def manifest(tmp_path):
    (tmp_path / "w").mkdir()
    lines = []
    for i in range(3):
        _write_wav(tmp_path / "w" / f"x{i}.wav", i)
        lines.append(json.dumps({"id": f"x{i}", "path": f"w/x{i}.wav", "lang": "en", "text": ""}))
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


class _Peer:
    def __call__(self, audio, language):
        raise RuntimeError("peer model missing")


def test_bench_run_on_tiny_lm(tmp_path, manifest):
    methods = expand_methods(["sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc", "faster-whisper"],
                             peers=["faster-whisper"])
    out = tmp_path / "out"
    source = PrefixSource(tokens=[3, 4, 5, 6], every=4, positional=True)
    bench = Bench(MODEL, source, DecodeOptions(), methods, out, save_traces=True,
                  peers={"faster-whisper": _Peer()}, progress=False)
    summary = bench.run(read_manifest(manifest))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ran = [r for r in rows if not r.get("derived") and not r.get("error")]
    assert {r["method"] for r in ran} == set(methods) - {"faster-whisper"}
    assert all(r["exact"] for r in ran)
    for r in ran:
        d = r["decomposition"]
        assert r["decomposition_ok"]
        assert d["T"] == pytest.approx(d["D"] + d["V"] - d["O"] + d["H"], abs=1e-9)
        assert d["T"] == pytest.approx(r["decode_s"])
    assert [r for r in rows if r["method"] == "faster-whisper"][0]["error"].endswith("peer model missing")
    assert sum(1 for r in rows if r["method"] == "sd" and r.get("derived")) == 3
    saved = json.loads((out / "summary.json").read_text())
    assert saved["methods"]["as2d"]["windows"] == 3
    assert set(saved["methods"]) >= {"target-only", "sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc"}
    assert saved["methods"]["sd"]["exact_windows"] == 3
    report = (out / "report.md").read_text()
    assert "| sd |" in report and "faster-whisper" in report
    assert (out / "tps_distribution.png").stat().st_size > 0
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 3 * len(methods) - 3  # the failing peer leaves no trace
    for t in traces:
        assert t["format"] == "as2d-trace/1"
        committed = []
        for call in t["calls"]:
            committed += call["commit"]
        first = t["tokens"][:1]
        # replaying the commits rebuilds the output: first token, then each call's commit
        assert (first + committed)[: len(t["tokens"])] == t["tokens"]
        # drafting from arrival publishes during the target's preparation, before the decode clock starts
        assert all(-t["prepare_s"] <= p["t"] <= t["decode_s"] + 1 for p in t["published"])
    assert summary["methods"]["target-only"]["ratio_vs_target_only"] == pytest.approx(1.0)


def test_bench_command_refuses_unknown_method(manifest, tmp_path):
    from as2d_bench.cli import bench

    result = CliRunner().invoke(bench, [str(manifest), "--methods", "as2d,bogus", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "unknown methods" in result.output


def test_summary_per_source_by_hand():
    rows = [
        _row("a", "target-only", 10, 1.0), _row("b", "target-only", 10, 1.0),
        _row("a", "as2d", 10, 0.5, proposed=10, accepted=5, source="s1", first_publish_s=0.1, all_published_s=0.4),
        _row("b", "as2d", 10, 0.5, proposed=10, accepted=5, source="s1", first_publish_s=0.3, all_published_s=0.6),
        _row("a", "as2d@s2", 10, 2.0, proposed=4, accepted=1, source="s2", first_publish_s=None, all_published_s=None),
        _row("b", "as2d@s2", 10, 2.0, proposed=4, accepted=1, source="s2", first_publish_s=0.5, all_published_s=0.9),
        *[_row(w, f"{k}@s2", 10, 1.0, source="s2") for w in "ab" for k in ("sd-k5", "sd-k6", "sd-k7", "sd-k8")],
        {"window": "a", "method": "asp@s2", "source": "s2", "tokens": 0, "decode_s": 0.0, "tps": 0.0,
         "error": "no prefix session"},
    ]
    m = summarize(rows)["methods"]
    assert m["as2d"]["ratio_vs_target_only"] == pytest.approx(2.0) and m["as2d"]["source"] == "s1"
    assert m["as2d@s2"]["ratio_vs_target_only"] == pytest.approx(0.5) and m["as2d@s2"]["source"] == "s2"
    assert m["as2d@s2"]["method"] == "as2d" and m["as2d@s2"]["slower_windows"] == 2
    assert m["as2d"]["acceptance"] == pytest.approx(0.5) and m["as2d@s2"]["coverage"] == pytest.approx(2 / 20)
    assert m["as2d"]["median_first_publish_s"] == pytest.approx(0.2)
    assert m["as2d"]["median_all_published_s"] == pytest.approx(0.5)
    assert m["as2d@s2"]["median_first_publish_s"] == pytest.approx(0.5)  # nulls do not count
    assert m["target-only"]["median_first_publish_s"] is None and m["target-only"]["source"] is None
    assert m["sd@s2"]["pooled_tps"] == pytest.approx(10.0) and m["sd@s2"]["source"] == "s2"
    assert "sd" not in m
    assert m["asp@s2"]["failed_windows"] == 1 and m["asp@s2"]["source"] == "s2"


def test_bench_with_two_sources(tmp_path, manifest):
    from tiny_lm import ScriptedSource

    first = PrefixSource(tokens=[3, 4, 5, 6], every=4, positional=True)  # offers prefix_session (capabilities.PrefixDrafting)
    second = ScriptedSource([5, 6, 7, 8, 9, 10], boundaries={1}, name="scripted")  # does not
    german = ScriptedSource([5, 6], name="german")
    german.languages = frozenset({"de"})
    methods = expand_methods(["as2d", "as2d-no-bc", "sd-k5"])
    out = tmp_path / "out"
    summary = Bench(SlowTarget(delay=0.002), [first, second, german], DecodeOptions(), methods, out, save_traces=True,
                    progress=False, warmup=False).run(read_manifest(manifest))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    assert set(by) == {"target-only", "as2d", "as2d@scripted", "as2d@german", "as2d-no-bc", "as2d-no-bc@scripted",
                       "as2d-no-bc@german", "sd-k5", "sd-k5@scripted", "sd-k5@german"}
    assert all(len(v) == 3 for v in by.values())
    assert {r["source"] for r in by["as2d"]} == {"prefix-drafter"}
    assert {r["source"] for r in by["as2d@scripted"]} == {"scripted"}
    assert {r["source"] for r in by["target-only"]} == {None}
    assert all(r["proposed"] > 0 for r in by["sd-k5"])
    for label in ("as2d", "as2d@scripted", "as2d-no-bc@scripted", "sd-k5"):
        for r in by[label]:
            assert r["exact"] is True
            assert r["first_publish_s"] is not None and r["first_publish_s"] >= 0
            assert r["all_published_s"] >= r["first_publish_s"]
    assert all(r["first_publish_s"] is None for r in by["target-only"])
    # the source does not serve the windows' language: target-only, and the row says so
    for r in by["as2d@german"]:
        assert r["exact"] is True and r["proposed"] == 0 and "does not draft 'en'" in r["note"]
        assert r["first_publish_s"] is None and r["source"] == "german"
    # a serial method on a source without prefix_session (capabilities.PrefixDrafting): an error row per window, not a crash
    for r in by["sd-k5@scripted"]:
        assert "PrefixDrafting" in r["error"] and r["source"] == "scripted"
    m = summary["methods"]
    assert m["as2d"]["source"] == "prefix-drafter" and m["as2d@scripted"]["source"] == "scripted"
    assert m["as2d"]["windows"] == m["as2d@scripted"]["windows"] == 3
    assert m["as2d@scripted"]["ratio_vs_target_only"] is not None
    assert m["as2d@scripted"]["median_first_publish_s"] >= 0
    assert m["sd-k5@scripted"]["failed_windows"] == 3
    assert summary["sources"] == ["prefix-drafter", "scripted", "german"]
    report = (out / "report.md").read_text()
    assert "first publish" in report and "| as2d@scripted | scripted |" in report
    assert "| sd-k5@scripted |" not in report and "- sd-k5@scripted: " in report  # listed as could not run
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    labels = {t["label"] for t in traces}
    assert "as2d@scripted" in labels and "sd-k5@scripted" not in labels
    assert all(t["method"] == t["label"].partition("@")[0] for t in traces)


def test_bench_command_source_options(manifest, tmp_path):
    from as2d_bench.cli import bench

    runner = CliRunner()
    both = runner.invoke(bench, [str(manifest), "--source", "a", "--sources", "a,b", "--out", str(tmp_path / "o")])
    assert both.exit_code == 2 and "not both" in both.output
    twice = runner.invoke(bench, [str(manifest), "--sources", "a,a", "--out", str(tmp_path / "o")])
    assert twice.exit_code == 2 and "twice" in twice.output


def test_serial_methods_keep_a_drafter_that_scores_a_prefix(tmp_path, manifest):
    """The as2d methods and the serial ones may draft with different sources; the report names each beside its row
    and heads with the user's clock."""
    from tiny_lm import ScriptedSource

    decoupled = ScriptedSource([5, 6, 7, 8, 9, 10], boundaries={1}, name="scripted")  # cannot score a prefix
    serial = PrefixSource(tokens=[3, 4, 5, 6], every=4, positional=True)
    methods = expand_methods(["as2d", "sd-k5", "asp"])
    out = tmp_path / "out"
    summary = Bench(SlowTarget(delay=0.002), decoupled, DecodeOptions(), methods, out, progress=False, warmup=False,
                    serial_source=serial).run(read_manifest(manifest))
    m = summary["methods"]
    assert set(m) == {"target-only", "as2d", "sd-k5", "asp"}  # one source of each kind: plain labels
    assert (m["as2d"]["source"], m["sd-k5"]["source"], m["asp"]["source"]) == ("scripted", "prefix-drafter",
                                                                             "prefix-drafter")
    assert all(m[k]["exact_windows"] == 3 and not m[k]["failed_windows"] for k in m)
    assert summary["sources"] == ["scripted", "prefix-drafter"]
    run = json.loads((out / "run.json").read_text())
    assert run["sources"] == ["scripted"] and run["serial_sources"] == ["prefix-drafter"]
    report = (out / "report.md").read_text()
    assert "| method | drafter | e2e TPS | x target-only (e2e) | slower (e2e) | decode TPS |" in report
    assert "| as2d | scripted |" in report and "| sd-k5 | prefix-drafter |" in report


def test_bench_default_drafters(manifest, tmp_path, built):
    """Without a named source the as2d methods draft as ``as2d run`` does, the serial ones with tiny.en (ONNX
    Runtime); a named source serves every method, and one that cannot score a prefix stops a serial method."""
    from as2d_bench.cli import bench
    from as2d_bench.spec import SERIAL_SOURCE, default_drafters
    from as2d_core.setup.build import DEFAULT_SOURCE
    from test_config_paths import SOURCE, TARGET

    assert default_drafters([]) == ((DEFAULT_SOURCE,), (SERIAL_SOURCE,))
    assert default_drafters(["a", "b"]) == (("a", "b"), None)
    out = tmp_path / "o"
    args = [str(manifest), "--target", TARGET, "--methods", "as2d,sd-k5", "--out", str(out)]
    result = CliRunner().invoke(bench, args)  # the test registry has neither default drafter: it stops there
    assert result.exit_code == 2 and f"unknown source '{DEFAULT_SOURCE}'" in result.output
    run = json.loads((out / "run.json").read_text())
    assert run["sources"] == [DEFAULT_SOURCE] and run["serial_sources"] == [SERIAL_SOURCE]
    assert run["methods"] == ["target-only", "as2d", "sd-k5"]
    result = CliRunner().invoke(bench, [*args, "--source", SOURCE])
    assert result.exit_code == 2 and result.output == (
        f"Error: {SOURCE} cannot score a prefix (PrefixDrafting), which the serial methods sd-k5 need: "
        f"drop them from --methods, or name no drafter (no --source, --sources or [source] in --config) and they "
        f"draft with {SERIAL_SOURCE}\n")


def test_summary_end_to_end_and_eligible_by_hand():
    rows = [
        _row("en1", "target-only", 10, 1.0, e2e_s=2.0), _row("de1", "target-only", 30, 1.0, e2e_s=3.0),
        _row("en1", "as2d", 10, 0.5, e2e_s=2.5, source="s", served=True),
        _row("de1", "as2d", 30, 1.0, e2e_s=3.0, source="s", served=False, note="source s does not draft 'de'"),
        # an older row without ``served`` or ``e2e_s``: the note and prepare_s + decode_s stand in
        _row("de2", "target-only", 20, 1.0, prepare_s=1.0), _row("de2", "as2d", 20, 1.0, prepare_s=1.5,
                                                                  note="source s does not draft 'de' (it serves en)"),
        _row("en1", "faster-whisper", 10, 0.4, e2e_s=1.0),
    ]
    summary = summarize(rows)
    m = summary["methods"]
    assert m["target-only"]["pooled_e2e_tps"] == pytest.approx(60 / 7)
    assert m["as2d"]["pooled_e2e_tps"] == pytest.approx(60 / 8)
    assert m["as2d"]["e2e_ratio_vs_target_only"] == pytest.approx(7 / 8)
    assert m["as2d"]["e2e_slower_windows"] == 2  # en1: 4 < 5; de2: 8 < 10; de1 ties
    assert m["faster-whisper"]["pooled_e2e_tps"] == pytest.approx(10.0)
    eligible = summary["eligible"]
    assert eligible["windows"] == ["en1"]
    e = eligible["methods"]
    assert e["as2d"]["pooled_tps"] == pytest.approx(20.0) and e["as2d"]["ratio_vs_target_only"] == pytest.approx(2.0)
    assert e["as2d"]["e2e_ratio_vs_target_only"] == pytest.approx(4 / 5)
    assert e["faster-whisper"]["e2e_ratio_vs_target_only"] == pytest.approx(2.0)
    assert e["target-only"]["windows"] == 1


class _StopsAt:
    """TinyLM that is interrupted (as by Ctrl-C) when it reaches one window: the run stops there."""

    name, vocabulary = MODEL.name, MODEL.vocabulary

    def __init__(self, window):
        self.window = window

    def prepare(self, request, threads):
        if request.request_id == self.window:
            raise KeyboardInterrupt
        return MODEL.prepare(request, threads)


def _stable(summary):
    """What two runs of the same windows share (timings differ run to run)."""
    keys = ("tokens", "windows", "exact_windows", "failed_windows", "source")
    return {"windows": summary["windows"], "eligible": summary["eligible"]["windows"],
            "methods": {m: {k: s.get(k) for k in keys} for m, s in summary["methods"].items()}}


def test_interrupted_run_resumes_to_the_same_summary(tmp_path, manifest):
    methods = expand_methods(["as2d", "sd-k5", "asp"])
    windows = read_manifest(manifest)

    def bench(target, out, **kw):
        source = PrefixSource(tokens=[3, 4, 5, 6], every=4, positional=True)
        return Bench(target, source, DecodeOptions(), methods, out, save_traces=True, progress=False, **kw)

    whole = bench(MODEL, tmp_path / "whole").run(windows)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        bench(_StopsAt("x2"), out).run(windows)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["window"] for r in rows} == {"x0", "x1"}  # every finished window was written as it finished
    with (out / "results.jsonl").open("a") as f:
        f.write('{"window": "x2", "method": "target-on')  # a row torn by the interruption
    resumed = bench(MODEL, out).run(windows)
    assert resumed["run"]["windows_run"] == 1  # only the window that had not finished
    assert _stable(resumed) == _stable(whole)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["window"], r["method"]) for r in rows) == sorted(
        (r["window"], r["method"]) for r in map(json.loads, (tmp_path / "whole" / "results.jsonl").open()))
    assert all(r["e2e_s"] >= r["decode_s"] for r in rows if not r.get("derived"))
    assert len((out / "traces.jsonl").read_text().splitlines()) == 3 * len(methods)
    again = bench(MODEL, out).run(windows)  # nothing left to run: the outputs are rebuilt from the rows
    assert again["run"]["windows_run"] == 0 and _stable(again) == _stable(whole)
    assert "Summary, eligible windows" in (out / "report.md").read_text()


def test_resume_refuses_another_configuration(tmp_path, manifest):
    from as2d_bench.cli import bench
    from as2d_bench.folder import ConfigMismatch

    windows = read_manifest(manifest)[:1]
    out = tmp_path / "o"
    Bench(MODEL, None, DecodeOptions(), ["target-only"], out, progress=False, warmup=False).run(windows)
    with pytest.raises(ConfigMismatch, match="options.budget 7 -> 3"):
        Bench(MODEL, None, DecodeOptions(budget=3), ["target-only"], out, progress=False).run(windows)
    fresh = Bench(MODEL, None, DecodeOptions(budget=3), ["target-only"], out, progress=False, fresh=True).run(windows)
    assert fresh["run"]["windows_run"] == 1 and fresh["options"]["budget"] == 3
    # the command says so in one line, before loading any model
    result = CliRunner().invoke(bench, [str(manifest), "--methods", "target-only", "--target", "tiny-lm",
                                        "--out", str(out)])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and "configured differently" in result.output


def test_summary_refuses_rows_from_another_kind_of_machine(tmp_path, manifest):
    from as2d_bench.machine import MixedMachines, bench_machine

    windows = read_manifest(manifest)
    out = tmp_path / "o"
    Bench(MODEL, None, DecodeOptions(), ["target-only"], out, progress=False, warmup=False).run(windows[:2])
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert all(r["machine"]["kind"] == bench_machine()["kind"] and r["machine"]["versions"]["as2d"] for r in rows)
    rows[1]["machine"] = {**rows[1]["machine"], "kind": "Other CPU x64 arm64"}  # as if measured elsewhere
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(MixedMachines, match="2 kinds of machine"):
        Bench(MODEL, None, DecodeOptions(), ["target-only"], out, progress=False).run(windows)
    pooled = Bench(MODEL, None, DecodeOptions(), ["target-only"], out, progress=False, pool_machines=True).run(windows)
    assert len(pooled["machines"]) == 2 and pooled["methods"]["target-only"]["windows"] == 3


def test_bench_command_worker_options_need_ray(manifest, tmp_path):
    from as2d_bench.cli import bench

    result = CliRunner().invoke(bench, [str(manifest), "--workers", "2", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and result.output == "Error: --workers and --cpus-per-worker need --ray\n"


def test_median_round_keeps_the_middle_run_and_hides_no_mismatch_or_failure():
    from as2d_bench.rows import median_round

    runs = [(_row("a", "as2d", 10, 1.0, e2e_s=e2e, exact=exact), {"round": i})
            for i, (e2e, exact) in enumerate([(3.0, True), (1.0, False), (2.0, True), (4.0, True)])]
    row, trace = median_round(runs)
    assert row["e2e_s"] == 2.0 and trace == {"round": 2}  # the lower middle of four
    assert row["e2e_s_rounds"] == [3.0, 1.0, 2.0, 4.0]
    assert row["exact"] is False  # the fastest round differed from target-only: the kept row says so
    failed = {"window": "a", "method": "as2d", "error": "RuntimeError: drafter gone"}
    assert median_round([runs[0], (failed, None), runs[2]]) == (failed, None)


def test_bench_repeats_every_method_and_keeps_its_median_round(tmp_path, manifest):
    from as2d_bench.cli import bench as bench_command

    methods = expand_methods(["as2d", "sd-k5"])
    source = PrefixSource(tokens=[3, 4, 5, 6], every=4, positional=True)
    out = tmp_path / "o"
    windows = read_manifest(manifest)[:2]
    summary = Bench(MODEL, source, DecodeOptions(), methods, out, save_traces=True, progress=False,
                    repeats=3).run(windows)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(methods)  # one row per window and method, not per round
    for r in rows:
        assert len(r["e2e_s_rounds"]) == 3 and r["e2e_s"] == sorted(r["e2e_s_rounds"])[1] and r["exact"]
    traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 3 * 2 * len(methods)  # every round's trace, numbered, its median round marked
    for r in rows:
        mine = [t for t in traces if (t["window"], t.get("label") or t["method"]) == (r["window"], r["method"])]
        if mine:
            assert sorted(t["round"] for t in mine) == [0, 1, 2]
            (median,) = [t for t in mine if t["median_round"]]
            assert median["decode_s"] + median["prepare_s"] == pytest.approx(r["e2e_s"])
    from as2d_tuning.records import read_traces

    assert len(read_traces([out])) == 2 * len(methods) and len(read_traces([out], rounds=True)) == len(traces)
    assert json.loads((out / "run.json").read_text())["repeats"] == 3
    assert summary["methods"]["as2d"]["windows"] == 2
    assert "every method 3 times" in (out / "report.md").read_text()
    with pytest.raises(ValueError):
        Bench(MODEL, source, DecodeOptions(), methods, out, repeats=0)
    result = CliRunner().invoke(bench_command, [str(manifest), "--repeats", "0", "--out", str(tmp_path / "p")])
    assert result.exit_code == 2 and "--repeats" in result.output
