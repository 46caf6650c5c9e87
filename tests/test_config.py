"""Per-task configuration files: shipped examples pass, bad files fail naming file, key and what is allowed."""
from __future__ import annotations

from pathlib import Path

import pytest

from as2d_core.setup import catalog, config, plugins
from as2d_core.setup.source_spec import SourceSpec
from as2d_core.contracts import WORD_PUNCTUATION, ScoreRules

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.toml"))

GOOD = """
task = "asr"
language = "en"
budget = 7
on_missing_device = "error"

[target]
model = "whisper-base"
backend = "onnxruntime"
device = "cpu"
threads = 2

[source]
name = "whisper-tiny.en"
threads = 1
"""


@pytest.fixture
def registry(monkeypatch):
    """Only the built-in parts: results must not depend on which plugins this machine has."""
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, "")
    catalog._PROBES.clear()
    yield plugins.load_registry(refresh=True)
    plugins._REGISTRY = None
    catalog._PROBES.clear()


@pytest.fixture
def whisper_registry(monkeypatch):
    """The Whisper and ONNX Runtime plugins: the facts that GOOD's parts register are checked."""
    pytest.importorskip("as2d_whisper")
    pytest.importorskip("as2d_onnxruntime")
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, "whisper,onnxruntime")
    catalog._PROBES.clear()
    yield plugins.load_registry(refresh=True)
    plugins._REGISTRY = None
    catalog._PROBES.clear()


def _check(tmp_path, text, registry, name="c.toml"):
    path = tmp_path / name
    path.write_text(text)
    return config.check_file(path, registry)


def test_examples_exist():
    names = {p.name for p in CONFIGS}
    assert "whisper-asr.toml" in names and len(names) >= 5


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_passes_structure_without_plugins(path, registry):
    report = config.check_file(path, registry)
    assert report.ok, report.errors
    assert not report.runnable and report.missing  # nothing is installed: it must say what is missing


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_passes_with_installed_plugins(path):
    plugins._REGISTRY = None
    catalog._PROBES.clear()
    report = config.check_file(path)
    assert report.ok, report.errors


def test_good_config(tmp_path, whisper_registry):
    registry = whisper_registry
    report = _check(tmp_path, GOOD, registry)
    assert report.ok, report.errors
    options = report.config.decode
    assert options.budget == 7 and options.target_threads == 2 and options.drafter_threads == 1
    assert report.config.source.backend == "onnxruntime"  # defaults to the part's first backend
    assert report.config.source.process is False
    report = _check(tmp_path, GOOD.replace("threads = 1", "threads = 1\nprocess = true"), registry)
    assert report.ok and report.config.source.process is True
    assert str(report.config.source.spec) == "whisper-tiny.en+process"


@pytest.mark.parametrize("text, name, in_process", [
    ("whisper-tiny.en", "whisper-tiny.en", True),
    ("whisper-tiny.en+process", "whisper-tiny.en", False),
    ("a+process+process", "a+process", False),  # only the last suffix says where it runs
])
def test_source_spec_parses_and_formats_back(text, name, in_process):
    spec = SourceSpec.parse(text)
    assert (spec.name, spec.in_process) == (name, in_process) and str(spec) == text


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("budget = 7", "budget = 65"), "budget: 65 is out of range; allowed: 1..64"),
        (("budget = 7", "budget = 0"), "budget: 0 is out of range"),
        (("budget = 7", "budjet = 7"), "budjet: unknown key; allowed in the top level: task, language"),
        (("threads = 2", "treads = 2"), "target.treads: unknown key; allowed in [target]: model, backend"),
        (('"whisper-tiny.en"', '"no-such-drafter"'), "source.name: unknown source 'no-such-drafter'; known sources:"),
        (('task = "asr"', 'task = "sing"'), "task: 'sing' is not allowed; choose one of asr, translate, qa"),
        (('language = "en"', 'language = "de"'), "language: source 'whisper-tiny.en' does not serve 'de'"),
        (('device = "cpu"', 'device = "gpu"'), "target.device: 'gpu' is not a device of onnxruntime; allowed: cpu, nnapi"),
        (('backend = "onnxruntime"', 'backend = "torch"'), "target.backend: 'whisper-base' does not run on 'torch'"),
        (('on_missing_device = "error"', 'on_missing_device = "silent"'), "on_missing_device: 'silent' is not allowed"),
        (("threads = 1", "threads = true"), "source.threads: must be an integer"),
        (("threads = 1", "threads = 1\nprocess = 1"), "source.process: must be true or false, got 1"),
        (("[target]", "[targets]"), "target: required table [target] is missing"),
        (("budget = 7", 'budget = 7\ntimestamps = "word"'), "timestamps: 'word' is not allowed; choose one of none"),
        (("budget = 7", "budget = 7\nprompt = 3"), "prompt: must be a string, got 3"),
        (("budget = 7", 'budget = 7\ncondition_on_previous_text = "yes"'), "condition_on_previous_text: must be true"),
        (("budget = 7", 'budget = 7\nword_timestamps = 1'), "word_timestamps: must be true"),
    ],
)
def test_bad_configs_name_key_and_allowed(tmp_path, whisper_registry, edit, expected):
    report = _check(tmp_path, GOOD.replace(*edit), whisper_registry)
    assert not report.ok
    assert any(expected in e for e in report.errors), report.errors


def test_timestamps_prompts_and_a_task_the_drafter_cannot_draft(tmp_path, whisper_registry):
    """The drafter cannot translate: the file is fine, it says so, and requests run target-only."""
    text = GOOD.replace('task = "asr"', 'task = "translate"\ntimestamps = "segment"\nprompt = "as2d, Whisper"\n'
                                          'hotwords = "CTranslate2"\ncondition_on_previous_text = true\n'
                                          'word_timestamps = true\nprefix = "So"\nsuppress_tokens = "-1,11"\n'
                                          'repetition_penalty = 1.1\nappend_punctuations = ".,"')
    report = _check(tmp_path, text, whisper_registry)
    assert report.ok, report.errors
    assert any("source 'whisper-tiny.en' does not draft 'translate'" in w for w in report.warnings), report.warnings
    options = report.config.decode
    assert (options.timestamps, options.prompt, options.hotwords, options.condition_on_previous_text) == (
        "segment", "as2d, Whisper", "CTranslate2", True)
    assert options.request_fields() == {"timestamps": "segment", "prompt": "as2d, Whisper", "hotwords": "CTranslate2",
                                        "word_timestamps": True, "temperature": 0.0, "seed": 0, "max_new_tokens": None,
                                        "prefix": "So", "rules": ScoreRules(suppress_tokens=(-1, 11),
                                                                            repetition_penalty=1.1),
                                        "punctuations": (WORD_PUNCTUATION[0], ".,")}


def test_parts_of_absent_plugins_are_checked_by_name_only(tmp_path, registry):
    """Their facts are their plugin's: the file is valid, and cannot run here until the plugin is installed."""
    report = _check(tmp_path, GOOD.replace('language = "en"', 'language = "de"'), registry)
    assert report.ok and not report.runnable, report.errors
    assert any(m.startswith("target: plugin 'whisper'") for m in report.missing), report.missing
    assert any(m.startswith("source: plugin 'whisper'") for m in report.missing), report.missing
    report = _check(tmp_path, GOOD.replace('"whisper-tiny.en"', '"no-such-drafter"'), registry)
    assert any("unknown source 'no-such-drafter'" in e for e in report.errors)


def test_tokenizer_mismatch_without_bridge(tmp_path, whisper_registry):
    registry = whisper_registry
    registry.add("source", "test", "ids-only", lambda o: None,
                 {"vocabulary": "ids-only", "decodes_text": False, "tasks": ("asr",)})
    report = _check(tmp_path, GOOD.replace('"whisper-tiny.en"', '"ids-only"'), registry)
    assert any("different tokenizers and no installed bridge connects them" in e for e in report.errors)


def test_invalid_toml_names_the_file(tmp_path, registry):
    report = _check(tmp_path, "budget = = 3", registry, "broken.toml")
    assert not report.ok and "not valid TOML" in report.errors[0]


def _with_backend(registry, devices):
    registry.add("backend", "test", "onnxruntime", lambda: devices, {"devices": ("cpu", "nnapi")})
    facts = {"vocabulary": "test", "backends": ("onnxruntime",)}
    registry.add("target", "test", "whisper-base", lambda o: None, facts)
    registry.add("source", "test", "whisper-tiny.en", lambda o: None, facts)


def test_missing_device_with_error_is_not_runnable(tmp_path, registry, monkeypatch):
    monkeypatch.setenv("AS2D_MODELS_DIR", str(tmp_path))
    _with_backend(registry, {"cpu": None, "nnapi": "no NNAPI provider in this build"})
    report = _check(tmp_path, GOOD.replace('device = "cpu"', 'device = "nnapi"'), registry)
    assert report.ok and not report.runnable
    assert any(m.startswith("target.device: 'nnapi' does not run here") and "on_missing_device" in m
               for m in report.missing), report.missing


def test_missing_device_with_cpu_falls_back_loudly(tmp_path, registry):
    _with_backend(registry, {"cpu": None, "nnapi": "no NNAPI provider in this build"})
    text = GOOD.replace('device = "cpu"', 'device = "nnapi"').replace('"error"', '"cpu"')
    report = _check(tmp_path, text, registry)
    assert report.devices["target"] == "cpu"
    assert any("running on cpu" in w for w in report.warnings)
    assert not any("device" in m for m in report.missing)


def test_overrides_apply_before_checking(tmp_path, registry):
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    report = config.check_file(path, registry, overrides={"budget": 99})
    assert any("budget: 99" in e for e in report.errors)
