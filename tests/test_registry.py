"""The catalog (registry.toml: how to install absent plugins) and the truth of the listings built from it."""
from __future__ import annotations

import sys
import tomllib
import types
from pathlib import Path

import pytest

from as2d_core.setup import catalog, plugins

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins" / "onnxruntime"), str(REPO / "plugins" / "mnn")]
QWEN3_ASR_INSTALL = "pip install ./plugins/lm './plugins/qwen3_asr[torch]'"


def uninstall(monkeypatch, *names: str) -> None:
    """Make the plugins ``names`` look not installed (their entry points vanish), whatever this venv holds."""
    entry_points = plugins.metadata.entry_points
    monkeypatch.setattr(plugins.metadata, "entry_points",
                        lambda group: [ep for ep in entry_points(group=group) if ep.name not in names])


@pytest.fixture
def fresh(monkeypatch):
    """A registry loaded with only the plugins named, so tests do not depend on what is installed."""
    def load(allow: str = ""):
        monkeypatch.setenv(plugins.ENV_ALLOWLIST, allow)
        catalog._PROBES.clear()
        return plugins.load_registry(refresh=True)

    yield load
    plugins._REGISTRY = None
    catalog._PROBES.clear()


def test_root_registry_is_the_packaged_one():
    assert (REPO / "registry.toml").read_bytes() == catalog.CATALOG_FILE.read_bytes()


def test_catalog_names_every_seed_part():
    data = tomllib.loads(catalog.CATALOG_FILE.read_text())
    assert {"qwen3-asr-0.6b", "parakeet-ctc", "sensevoice-small", "qwen2.5-omni-3b", "whisper-tiny.en",
            "pocketsphinx"} <= set(data["sources"])
    assert {"qwen3-asr-1.7b", "qwen2.5-omni-7b", "whisper-base"} <= set(data["targets"])
    assert {"onnxruntime", "mnn", "torch"} <= set(data["backends"])
    assert {"identity", "text"} <= set(data["bridges"])
    for facts in data["plugins"].values():
        assert set(facts) == {"distribution", "install", "description"}
    for kind in catalog.KINDS:
        for name, entry in data[catalog._SECTIONS[kind]].items():
            assert set(entry) == {"plugin", "description"}, (kind, name)  # every other fact is its plugin's
            assert entry["plugin"] in data["plugins"] and entry["description"], (kind, name)


def test_catalog_names_every_installed_part(fresh):
    """Each part a plugin registers can be listed, with its plugin, before that plugin is installed."""
    data = catalog.load_catalog()
    registry = fresh(",".join(data["plugins"]))
    for (kind, name), part in registry.parts.items():
        if kind not in catalog.KINDS:  # model installers and outside peers are not listed before install
            continue
        listed = data[catalog._SECTIONS[kind]].get(name)
        assert listed is not None, f"{kind} {name!r} of plugin {part.plugin!r} is not in the catalog"
        assert listed["plugin"] == part.plugin, name
        assert part.info.get("install", data["plugins"][part.plugin]["install"]) == \
            data["plugins"][part.plugin]["install"], (kind, name)


def test_installed_part_shows_its_registered_facts(fresh):
    pytest.importorskip("as2d_whisper")
    registry = fresh("whisper")
    part = registry.find("source", "whisper-tiny.en")
    row = catalog.row(catalog.lookup("source", "whisper-tiny.en", registry), registry)
    assert row["installed"] and row["plugin"] == "whisper"
    assert row["description"] == part.info["description"]
    assert row["vocabulary"] == "whisper-en" and row["languages"] == ["en"] and row["tasks"] == ["asr"]
    assert row["install"] == "pip install ./plugins/whisper" and row["distribution"] == "as2d-whisper"
    assert row["layout"] == part.info["layout"]


def test_not_installed_parts_say_how_to_install(fresh, monkeypatch):
    uninstall(monkeypatch, "qwen3_asr", "mnn")
    registry = fresh("")
    assert "qwen3_asr" not in registry.skipped  # not installed, rather than installed but left out
    rows = {e.name: catalog.row(e, registry) for e in catalog.entries("source", registry)}
    row = rows["qwen3-asr-0.6b"]
    assert not row["installed"] and not row["available"] and row["plugin"] == "qwen3_asr"
    assert row["reason"] == f"plugin 'qwen3_asr' is not installed: {QWEN3_ASR_INSTALL}"
    assert row["install"] == QWEN3_ASR_INSTALL and row["distribution"] == "as2d-qwen3-asr"
    assert row["description"] == catalog.load_catalog()["sources"]["qwen3-asr-0.6b"]["description"]
    assert row["vocabulary"] is None and row["required_files"] == []  # its plugin's facts, unknown until installed
    backends = {e.name: catalog.row(e, registry) for e in catalog.entries("backend", registry)}
    assert not backends["torch"]["installed"] and QWEN3_ASR_INSTALL in backends["torch"]["reason"]
    assert backends["torch"]["devices"] == {}


def test_skipped_plugin_is_reported_as_not_loaded(fresh, monkeypatch):
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: [
        types.SimpleNamespace(name="whisper", load=lambda: None, dist=None)])
    registry = fresh("")
    entry = catalog.lookup("target", "whisper-base", registry)
    assert "AS2D_PLUGINS" in catalog.row(entry, registry)["reason"]


def test_missing_model_files_are_named(fresh, tmp_path):
    registry = plugins.Registry()
    registry.add("target", "p", "t", lambda o: None, {"model_dir": "t", "required_files": ("a.onnx", "b.json")})
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.onnx").write_text("")
    row = catalog.row(catalog.lookup("target", "t", registry, {}), registry, tmp_path)
    assert row["installed"] and not row["available"]
    assert row["missing_files"] == ["b.json"] and str(tmp_path / "t") in row["reason"]


def test_backend_files_are_checked_per_backend(fresh, tmp_path):
    """A folder complete for one backend's export is available; the default backend's gaps are named otherwise."""
    registry = plugins.Registry()
    registry.add("target", "p", "t", lambda o: None, {
        "model_dir": "t", "backends": ("mnn", "torch"), "required_files": ("config.json",),
        "backend_files": {"mnn": ("llm.mnn",), "torch": ("model.safetensors",)}})
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    entry = catalog.lookup("target", "t", registry, {})
    row = catalog.row(entry, registry, tmp_path)
    assert not row["available"] and row["missing_files"] == ["llm.mnn"] and row["files_ready_for"] == []
    (folder / "model.safetensors").write_text("")
    row = catalog.row(entry, registry, tmp_path)
    assert row["files_ready_for"] == ["torch"] and row["missing_files"] == []
    assert catalog.missing_files(entry, tmp_path, "mnn")[1] == ["llm.mnn"]
    assert catalog.missing_files(entry, tmp_path, "torch")[1] == []


def test_sharded_checkpoint_stands_in_for_one_weights_file(fresh, tmp_path):
    registry = plugins.Registry()
    registry.add("target", "p", "t", lambda o: None, {
        "model_dir": "t", "required_files": ("config.json", "model.safetensors"),
        "file_alternatives": {"model.safetensors": ("model.safetensors.index.json",)}})
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    entry = catalog.lookup("target", "t", registry, {})
    assert catalog.missing_files(entry, tmp_path)[1] == ["model.safetensors"]
    (folder / "model.safetensors.index.json").write_text("{}")
    assert catalog.missing_files(entry, tmp_path)[1] == []


def test_onnxruntime_probe_tells_nnapi_is_missing(monkeypatch):
    import onnxruntime

    import as2d_onnxruntime

    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    result = as2d_onnxruntime.probe()
    assert result["cpu"] is None
    assert "NnapiExecutionProvider" in result["nnapi"] and "CPU" in result["nnapi"]
    with pytest.raises(RuntimeError, match="nnapi"):
        as2d_onnxruntime.providers_for("nnapi")
    monkeypatch.setattr(onnxruntime, "get_available_providers",
                        lambda: ["NnapiExecutionProvider", "CPUExecutionProvider"])
    assert as2d_onnxruntime.probe()["nnapi"] is None


def test_mnn_probe_without_mnn_says_how_to_install(monkeypatch):
    import as2d_mnn

    monkeypatch.setitem(sys.modules, "MNN", None)
    result = as2d_mnn.probe()
    assert all("pip install MNN" in why for why in result.values())


def test_mnn_probe_pypi_build_has_no_opencl(monkeypatch, tmp_path):
    import as2d_mnn

    (tmp_path / "__init__.py").write_text("")
    monkeypatch.setitem(sys.modules, "MNN", types.SimpleNamespace(__file__=str(tmp_path / "__init__.py")))
    result = as2d_mnn.probe()
    assert result["cpu"] is None and "CPU-only" in result["opencl"]


def _entry(kind, name, **info):
    return catalog.Entry(kind, name, "p", info, True, False)


def test_bridge_choice():
    text = _entry("bridge", "text", connects=(("*", "*"),), needs=("decodes_text", "encodes_text"))
    target = _entry("target", "t", vocabulary="a")
    assert catalog.bridge_between(_entry("source", "s", vocabulary="a"), target, [text]) == "identity"
    assert catalog.bridge_between(_entry("source", "s", vocabulary="b"), target, [text]) == "text"
    assert catalog.bridge_between(_entry("source", "s", vocabulary="b", decodes_text=False), target, [text]) is None
    pair = _entry("bridge", "b2a", connects=(("b", "a"),))
    assert catalog.bridge_between(_entry("source", "s", vocabulary="b", decodes_text=False), target, [pair]) == "b2a"


def test_plugin_rows_list_known_but_missing_plugins(fresh, monkeypatch):
    uninstall(monkeypatch, "omni")
    rows = {r["name"]: r for r in catalog.plugin_rows(fresh(""))}
    assert rows["as2d.builtins"]["installed"] and "bridge:text" in rows["as2d.builtins"]["parts"]
    omni = rows["omni"]
    assert not omni["installed"] and not omni["available"] and omni["distribution"] == "as2d-omni"
    assert omni["install"] == "pip install ./plugins/lm ./plugins/mnn ./plugins/omni" and omni["install"] in omni["reason"]


def test_the_target_and_the_source_load_side_by_side_and_either_ones_error_is_raised():
    """Each part waits until the other has started loading (built one after the other, the barrier would break),
    so the two models load at once; a failure of either reaches the caller."""
    import threading

    from as2d_core.setup.build import build_together

    both = threading.Barrier(2, timeout=10)

    def part(name: str) -> str:
        both.wait()
        return name

    assert build_together(lambda: part("target"), lambda: part("source")) == ("target", "source")
    assert build_together(lambda: "target", None) == ("target", None)

    def broken():
        raise FileNotFoundError("no weights here")

    for target, source in ((lambda: "target", broken), (broken, lambda: "source")):
        with pytest.raises(FileNotFoundError, match="no weights here"):
            build_together(target, source)
