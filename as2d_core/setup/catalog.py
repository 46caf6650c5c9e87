"""Every known part: what installed plugins register, and the catalog (``registry.toml``) for the rest.

Listings and ``as2d config check`` need to know about parts that are not
installed (to say how to get them) and to tell the truth about those that are:
is the plugin loaded, are the model files there, which devices really run.
A part's facts come only from its plugin's registration; the catalog adds only
which plugin provides a part, its description and how to install that plugin.
"""
from __future__ import annotations

import fnmatch
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import attrs

from as2d_core.contracts import BridgeFactory, Source, Target
from as2d_core.setup.paths import absent_files
from as2d_core.setup.paths import models_dir as default_models_dir
from as2d_core.setup.plugins import Registry, load_registry
from as2d_core.setup.source_spec import SourceSpec

CATALOG_FILE = Path(__file__).with_name("registry.toml")
KINDS = ("source", "target", "backend", "bridge")
_SECTIONS = {"source": "sources", "target": "targets", "backend": "backends", "bridge": "bridges"}
_TUPLE_KEYS = ("tasks", "languages", "backends", "required_files", "devices", "needs")


@cache
def load_catalog(path: Path = CATALOG_FILE) -> dict[str, Any]:
    """The parsed catalog (packaged next to this module, so it works installed non-editable)."""
    with open(path, "rb") as f:
        return tomllib.load(f)


@attrs.define
class Entry:
    """One part as the user sees it: its plugin's install facts and, when installed, the registered ``info``."""

    kind: str
    name: str
    plugin: str | None  # entry-point name of the providing plugin
    info: dict[str, Any]
    installed: bool  # a loaded plugin registers it
    in_catalog: bool
    factory: Any = None

    @property
    def vocabulary(self) -> str | None:
        return self.info.get("vocabulary")

    def tuple_info(self, key: str) -> tuple | None:
        value = self.info.get(key)
        return None if value is None else tuple(value)


def _plugin_facts(catalog: dict, plugin: str | None) -> dict[str, Any]:
    return dict(catalog.get("plugins", {}).get(plugin, {})) if plugin else {}


def entries(kind: str, registry: Registry | None = None, catalog: dict | None = None) -> list[Entry]:
    """Every known part of ``kind``: the catalog's and any extra that a plugin registers."""
    registry = registry if registry is not None else load_registry()
    catalog = catalog if catalog is not None else load_catalog()
    known = catalog.get(_SECTIONS[kind], {})
    names = sorted(set(known) | set(registry.names(kind)))
    out = []
    for name in names:
        listed = known.get(name, {})
        part = registry.find(kind, name)
        plugin = part.plugin if part else listed.get("plugin")
        own = part.info if part else {"description": listed.get("description", "")}
        info = {**_plugin_facts(catalog, plugin), **own}
        loaded = next((p for p in registry.plugins if p["name"] == plugin), None) if part else None
        if loaded and loaded["distribution"]:
            info["distribution"] = loaded["distribution"]
        for key in _TUPLE_KEYS:
            if info.get(key) is not None:
                info[key] = tuple(info[key])
        out.append(Entry(kind, name, plugin, info, part is not None, name in known, part.factory if part else None))
    return out


def lookup(kind: str, name: str, registry: Registry | None = None, catalog: dict | None = None) -> Entry | None:
    return next((e for e in entries(kind, registry, catalog) if e.name == name), None)


def install_hint(entry: Entry) -> str:
    """The command that installs the plugin providing ``entry``."""
    return entry.info.get("install") or f"install a plugin that registers {entry.kind} {entry.name!r}"


def not_installed_reason(entry: Entry, registry: Registry | None = None) -> str:
    registry = registry if registry is not None else load_registry()
    if entry.plugin in registry.skipped:
        return f"plugin {entry.plugin!r} {registry.skipped[entry.plugin]}"
    return f"plugin {entry.plugin or '?'!r} is not installed: {install_hint(entry)}"


def default_backend(entry: Entry) -> str | None:
    """A part runs on its first listed backend unless told otherwise."""
    return next(iter(entry.tuple_info("backends") or ()), None)


def required_files(entry: Entry, backend: str | None = None) -> tuple[str, ...]:
    """The files every backend reads plus those of ``backend`` (default: the part's first backend).

    Backends may read different exports of one model (MNN's llmexport folder, a
    Hugging Face checkpoint): ``backend_files`` lists each one's own files.
    """
    if backend is None:
        backend = default_backend(entry)
    own = (entry.info.get("backend_files") or {}).get(backend, ())
    return tuple(entry.info.get("required_files") or ()) + tuple(own)


def missing_files(entry: Entry, models_dir: Path | None = None,
                  backend: str | None = None) -> tuple[Path | None, list[str]]:
    """The model folder of ``entry`` and which of the files ``backend`` needs are absent."""
    folder_name = entry.info.get("model_dir")
    if not folder_name:
        return None, []
    folder = Path(models_dir or default_models_dir()) / folder_name
    return folder, absent_files(folder, required_files(entry, backend), entry.info.get("file_alternatives"))


def ready_backends(entry: Entry, models_dir: Path | None = None) -> list[str]:
    """The part's backends whose files are all in its model folder."""
    return [b for b in entry.tuple_info("backends") or () if not missing_files(entry, models_dir, b)[1]]


def files_reason(entry: Entry, folder: Path, missing: list[str]) -> str:
    how = entry.info.get("model_install")
    layout = entry.info.get("layout")
    text = f"model files missing in {folder}: {', '.join(missing)}"
    if how:
        text += f"; run `{how}`"
    elif layout:
        text += f"; supply {layout}"
    return text


_PROBES: dict[str, dict[str, str | None]] = {}


def probe_devices(entry: Entry) -> dict[str, str | None]:
    """``{device: None if it really runs here, else why not}`` for a backend (probed once per process)."""
    known = entry.info.get("devices") or ()
    notes = entry.info.get("notes") or {}
    if not entry.installed:
        return {d: "backend plugin not installed" + (f"; {notes[d]}" if d in notes else "") for d in known}
    if entry.name not in _PROBES:
        try:
            result = dict(entry.factory())
        except Exception as exc:  # a failing probe means nothing is known to run
            result = {d: f"probe failed: {type(exc).__name__}: {exc}" for d in known or ("cpu",)}
        _PROBES[entry.name] = result
    result = dict(_PROBES[entry.name])
    for device in known:
        result.setdefault(device, notes.get(device) or "not reported by the backend's probe")
    return result


def row(entry: Entry, registry: Registry | None = None, models_dir: Path | None = None) -> dict[str, Any]:
    """The JSON row of a listing: the truth about one part on this machine."""
    info = entry.info
    out: dict[str, Any] = {
        "name": entry.name,
        "kind": entry.kind,
        "plugin": entry.plugin,
        "distribution": info.get("distribution"),
        "installed": entry.installed,
        "available": False,
        "reason": None,
        "install": info.get("install"),
        "description": info.get("description", ""),
        "in_catalog": entry.in_catalog,
    }
    if entry.kind in ("source", "target"):
        folder, missing = missing_files(entry, models_dir)
        ready = ready_backends(entry, models_dir)
        if missing and ready:  # the default backend's files are absent, another backend's are complete
            missing = []
        out.update(
            tasks=list(info.get("tasks") or ()),
            languages=None if info.get("languages") is None else list(info["languages"]),
            vocabulary=entry.vocabulary,
            backends=list(info.get("backends") or ()),
            model_dir=str(folder) if folder else None,
            required_files=list(info.get("required_files") or ()),
            backend_files={b: list(f) for b, f in (info.get("backend_files") or {}).items()},
            files_ready_for=ready,
            missing_files=missing,
            layout=info.get("layout"),
        )
        if not entry.installed:
            out["reason"] = not_installed_reason(entry, registry)
        elif missing:
            out["reason"] = files_reason(entry, folder, missing)
        else:
            out["available"] = True
    elif entry.kind == "backend":
        devices = probe_devices(entry)
        out["devices"] = {d: {"runs": why is None, "reason": why} for d, why in devices.items()}
        running = [d for d, why in devices.items() if why is None]
        if not entry.installed:
            out["reason"] = not_installed_reason(entry, registry)
        elif not running:
            out["reason"] = "no device runs here: " + "; ".join(dict.fromkeys(devices.values()))
        else:
            out["available"] = True
            down = [f"{d}: {why}" for d, why in devices.items() if why is not None]
            out["reason"] = f"runs here on {', '.join(running)}" + (f"; not {'; '.join(down)}" if down else "")
    else:  # bridge
        out.update(connects=[list(p) for p in info.get("connects") or ()], needs=list(info.get("needs") or ()))
        if entry.installed:
            out["available"] = True
        else:
            out["reason"] = not_installed_reason(entry, registry)
    return out


def _matches(pattern: str, vocabulary: str | None) -> bool:
    return vocabulary is not None and fnmatch.fnmatchcase(vocabulary, pattern)


def choose_bridge(source_vocabulary: str | None, target_vocabulary: str | None, capabilities: dict[str, bool],
                  bridges) -> str | None:
    """Name of the first of ``bridges`` (``(name, info)`` pairs) that connects the two vocabularies
    and whose needs the pair meets; ``identity`` for equal vocabularies."""
    if source_vocabulary is not None and source_vocabulary == target_vocabulary:
        return "identity"
    for name, info in bridges:
        if not all(capabilities.get(need, False) for need in info.get("needs") or ()):
            continue
        for pair in info.get("connects") or ():
            if _matches(pair[0], source_vocabulary) and _matches(pair[1], target_vocabulary):
                return name
    return None


def _capabilities(source_info: dict, target_info: dict) -> dict[str, bool]:
    return {"decodes_text": source_info.get("decodes_text", True), "encodes_text": target_info.get("encodes_text", True)}


def bridge_between(source: Entry, target: Entry, bridges: list[Entry] | None = None) -> str | None:
    """Name of the installed bridge that carries ``source`` tokens to ``target`` (``identity`` for equal vocabularies)."""
    installed = ((b.name, b.info) for b in (bridges if bridges is not None else entries("bridge")) if b.installed)
    return choose_bridge(source.vocabulary, target.vocabulary, _capabilities(source.info, target.info), installed)


def pair_problem(source: Entry, target: Entry, bridges: list[Entry] | None = None) -> str | None:
    """Why drafter ``source`` can never draft for ``target`` (None when some request can use it): no bridge
    between their vocabularies, or no language or task in common (``None`` lists mean any)."""
    if bridge_between(source, target, bridges) is None:
        return (f"source {source.name!r} (vocabulary {source.vocabulary!r}) and target {target.name!r} (vocabulary "
                f"{target.vocabulary!r}) use different tokenizers and no installed bridge connects them")
    for key, what in (("languages", "language"), ("tasks", "task")):
        drafts, serves = source.tuple_info(key), target.tuple_info(key)
        if drafts is not None and serves is not None and not set(drafts) & set(serves):
            return (f"source {source.name!r} drafts the {key} {', '.join(drafts)} and target {target.name!r} does "
                    f"{', '.join(serves)}: no {what} in common, so it would never draft; choose another --source")
    return None


def check_pair(source_name: str, target_name: str, registry: Registry | None = None) -> None:
    """A ValueError naming why two registered parts cannot work as drafter and target (``pair_problem``); names
    no plugin registers are left to the build, whose error lists what is installed."""
    source = lookup("source", SourceSpec.parse(source_name).name, registry)
    target = lookup("target", target_name, registry)
    if source is None or target is None or not (source.installed and target.installed):
        return
    problem = pair_problem(source, target, entries("bridge", registry))
    if problem is not None:
        raise ValueError(problem)


def resolve_bridge(source: Source, target: Target, registry: Registry | None = None) -> BridgeFactory:
    """The registered bridge that carries ``source`` tokens to ``target``, chosen once when the two load.

    The engine calls it for a fresh bridge per request. Raises ``LookupError`` when no registered
    bridge connects the pair (``as2d config check`` says so before the models load).
    """
    registry = registry if registry is not None else load_registry()
    source_part = registry.find("source", SourceSpec.parse(source.name).name)
    target_part = registry.find("target", target.name)
    capabilities = _capabilities(source_part.info if source_part else {}, target_part.info if target_part else {})
    bridges = ((name, registry.get("bridge", name).info) for name in registry.names("bridge"))
    name = choose_bridge(source.vocabulary, target.vocabulary, capabilities, bridges)
    if name is None:
        raise LookupError(f"no registered bridge carries {source.name} ({source.vocabulary}) "
                          f"to {target.name} ({target.vocabulary})")
    return registry.get("bridge", name).factory


def plugin_rows(registry: Registry | None = None, catalog: dict | None = None) -> list[dict[str, Any]]:
    """Loaded plugins, installed-but-skipped ones, and catalog plugins that are not installed."""
    registry = registry if registry is not None else load_registry()
    catalog = catalog if catalog is not None else load_catalog()
    known = catalog.get("plugins", {})
    rows = []
    for plugin in registry.plugins:
        facts = known.get(plugin["name"], {})
        rows.append({
            "name": plugin["name"], "kind": "plugin", "plugin": plugin["name"],
            "distribution": plugin["distribution"], "version": plugin["version"],
            "installed": True, "available": plugin["error"] is None,
            "reason": f"registration failed: {plugin['error']}" if plugin["error"] else None,
            "parts": plugin["parts"], "install": facts.get("install"),
            "description": facts.get("description", ""),
        })
    loaded = {p["name"] for p in registry.plugins}
    for name, why in registry.skipped.items():
        facts = known.get(name, {})
        rows.append({
            "name": name, "kind": "plugin", "plugin": name, "distribution": facts.get("distribution"),
            "version": None, "installed": True, "available": False, "reason": why, "parts": [],
            "install": facts.get("install"), "description": facts.get("description", ""),
        })
    for name, facts in known.items():
        if name in loaded or name in registry.skipped:
            continue
        rows.append({
            "name": name, "kind": "plugin", "plugin": name, "distribution": facts.get("distribution"),
            "version": None, "installed": False, "available": False,
            "reason": f"not installed: {facts.get('install')}", "parts": [],
            "install": facts.get("install"), "description": facts.get("description", ""),
        })
    return sorted(rows, key=lambda r: (not r["installed"], r["name"]))
