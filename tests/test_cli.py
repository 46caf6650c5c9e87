"""The listing and config commands, in process (the fresh-venv round trip is in test_cli_plugin_venv.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from as2d_core.setup import catalog, plugins
from as2d_core.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
FIELDS = {"name", "kind", "plugin", "installed", "available", "reason"}
QWEN3_ASR_INSTALL = "pip install ./plugins/lm './plugins/qwen3_asr[torch]'"


@pytest.fixture
def invoke(monkeypatch, tmp_path):
    monkeypatch.setenv("AS2D_MODELS_DIR", str(tmp_path / "models"))
    entry_points = plugins.metadata.entry_points

    def run(*args, allow: str | None = "", absent: tuple[str, ...] = ()):
        """``absent``: entry-point names that look not installed, whatever this venv holds."""
        monkeypatch.setattr(plugins.metadata, "entry_points",
                            lambda group: [ep for ep in entry_points(group=group) if ep.name not in absent])
        if allow is None:
            monkeypatch.delenv(plugins.ENV_ALLOWLIST, raising=False)
        else:
            monkeypatch.setenv(plugins.ENV_ALLOWLIST, allow)
        plugins._REGISTRY = None
        catalog._PROBES.clear()
        return CliRunner().invoke(cli, [str(a) for a in args])

    yield run
    plugins._REGISTRY = None
    catalog._PROBES.clear()


@pytest.mark.parametrize("group, kind", [("sources", "source"), ("targets", "target"), ("backends", "backend"),
                                         ("bridges", "bridge"), ("plugins", "plugin")])
def test_listings_json(invoke, group, kind):
    result = invoke(group, "list", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows and all(FIELDS <= set(row) and row["kind"] == kind for row in rows)


def test_sources_plain_says_how_to_install(invoke):
    result = invoke("sources", "list", absent=("qwen3_asr",))
    assert result.exit_code == 0
    assert "qwen3-asr-0.6b\tnot installed\tplugin=qwen3_asr\tQwen3-ASR-0.6B" in result.output  # its description
    assert f"plugin 'qwen3_asr' is not installed: {QWEN3_ASR_INSTALL}" in result.output


def test_sources_list_reads_the_right_way_round(invoke, monkeypatch):
    """A drafter whose plugin is installed but whose model files are missing is not "installed": it says its
    files are missing; one whose files are there says ready."""
    pytest.importorskip("as2d_whisper")
    missing = invoke("sources", "list", allow="whisper").output  # AS2D_MODELS_DIR: an empty folder
    assert "whisper-tiny.en\tmodel files missing\tplugin=whisper" in missing
    assert "model files missing in " in missing and "\tinstalled\t" not in missing
    rows = {r["name"]: r for r in json.loads(invoke("sources", "list", "--json", allow="whisper").output)}
    assert rows["whisper-tiny.en"]["status"] == "model files missing" and not rows["whisper-tiny.en"]["available"]
    monkeypatch.delenv("AS2D_MODELS_DIR")  # the models this machine installed (scripts/setup.sh)
    ready = {r["name"]: r for r in json.loads(invoke("sources", "list", "--json", allow="whisper").output)}
    if not ready["whisper-tiny.en"]["available"]:
        pytest.skip("whisper-tiny.en is not installed here (as2d models install whisper-tiny.en)")
    assert ready["whisper-tiny.en"]["status"] == "ready"
    assert "whisper-tiny.en\tready\tplugin=whisper" in invoke("sources", "list", allow="whisper").output


def test_backends_list_reports_devices_that_really_run(invoke):
    pytest.importorskip("as2d_onnxruntime")
    rows = {r["name"]: r for r in json.loads(invoke("backends", "list", "--json", allow="onnxruntime").output)}
    ort = rows["onnxruntime"]
    assert ort["installed"] and ort["available"] and ort["devices"]["cpu"]["runs"]
    import onnxruntime

    if "NnapiExecutionProvider" not in onnxruntime.get_available_providers():
        assert not ort["devices"]["nnapi"]["runs"] and "silently" in ort["devices"]["nnapi"]["reason"]
    mnn = rows["mnn"]  # not loaded here: either not installed (install hint) or left out by AS2D_PLUGINS
    assert not mnn["installed"] and ("pip install ./plugins/mnn" in mnn["reason"] or "AS2D_PLUGINS" in mnn["reason"])


def test_whisper_listed_when_allowed(invoke):
    pytest.importorskip("as2d_whisper")
    rows = {r["name"]: r for r in json.loads(invoke("targets", "list", "--json", allow="whisper").output)}
    assert rows["whisper-base"]["installed"] and rows["whisper-base"]["plugin"] == "whisper"
    rows = {r["name"]: r for r in json.loads(invoke("targets", "list", "--json").output)}
    assert not rows["whisper-base"]["installed"] and "AS2D_PLUGINS" in rows["whisper-base"]["reason"]


def test_config_check_all_shipped(invoke):
    files = sorted((REPO / "configs").glob("*.toml"))
    for allow in ("", None):
        result = invoke("config", "check", *files, allow=allow)
        assert result.exit_code == 0, result.output
        assert "INVALID" not in result.output


def test_config_check_here_fails_on_what_is_missing(invoke):
    path = REPO / "configs" / "redmi-k70-pro-qwen3-asr.toml"
    result = invoke("config", "check", "--here", path, absent=("qwen3_asr", "mnn"))
    assert result.exit_code == 1
    assert f"missing here: target: plugin 'qwen3_asr' is not installed: {QWEN3_ASR_INSTALL}" in result.output
    assert "missing here: target.backend: plugin 'mnn' is not installed: pip install ./plugins/mnn" in result.output


def test_config_check_here_names_missing_model_files(invoke, tmp_path):
    pytest.importorskip("as2d_whisper")
    path = REPO / "configs" / "whisper-asr.toml"
    result = invoke("config", "check", "--here", path, allow="whisper,onnxruntime")
    assert result.exit_code == 1
    folder = tmp_path / "models" / "whisper-base"
    assert (f"missing here: target: model files missing in {folder}: encoder.onnx, encoder.onnx.data, decoder.onnx, "
            "decoder.onnx.data, tokenizer.json, model.json; run `as2d models install whisper-base`") in result.output
    assert f"missing here: source: model files missing in {tmp_path / 'models' / 'whisper-tiny.en'}" in result.output


def test_config_check_bad_file(invoke, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('budget = 100\ncolour = "red"\n[target]\nmodel = "whisper-base"\n')
    result = invoke("config", "check", bad, "--json")
    assert result.exit_code == 1
    (report,) = json.loads(result.output)
    assert not report["ok"]
    assert any(e.startswith("colour: unknown key") for e in report["errors"])
    assert any(e.startswith("budget: 100 is out of range; allowed: 1..64") for e in report["errors"])


def test_run_config_refuses_bad_and_unrunnable(invoke, tmp_path):
    audio = REPO / "examples" / "ljspeech_en_w00.wav"  # real audio: `run` reads it before it reads the config
    bad = tmp_path / "bad.toml"
    bad.write_text('[target]\nmodel = "whisper-base"\n[source]\nname = "nope"\n')
    result = invoke("run", audio, "--config", bad)
    assert result.exit_code != 0 and f"{bad}: source.name: unknown source 'nope'" in result.output
    k70 = REPO / "configs" / "redmi-k70-pro-qwen3-asr.toml"
    result = invoke("run", audio, "--config", k70, absent=("qwen3_asr", "mnn"))
    assert result.exit_code != 0
    assert f"cannot run here: target: plugin 'qwen3_asr' is not installed: {QWEN3_ASR_INSTALL}" in result.output
    result = invoke("run", audio, "--config", k70, "--budget", "0")
    assert result.exit_code != 0 and "budget: 0 is out of range" in result.output
