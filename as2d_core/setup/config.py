"""Per-task configuration files (TOML): which target, source, backend, device and budget.

Two levels of checking, kept apart on purpose:

- ``errors``: the file itself is wrong (unknown key, bad value, unknown part, a
  source that cannot draft for this target, a device the backend does not have).
  These fail ``as2d config check`` everywhere.
- ``missing``: the file is fine but cannot run on this machine (plugin not
  installed, model files absent, a device that does not really run here with
  ``on_missing_device = "error"``). A part whose plugin is not installed is
  checked by name only: its tasks, languages, vocabulary and backends are what
  that plugin registers, so they are checked once it is installed (a backend and
  device the file names are still checked against the backend's own plugin).
  ``config check`` reports them; ``--here`` and
  ``as2d run --config`` fail on them. A device fallback is never silent: it is
  only taken with ``on_missing_device = "cpu"`` and is reported as a warning.

Example::

    task = "asr"                # asr | translate | qa
    language = "en"             # omit to let the target detect it (once a file, on its first 30 s)
    multilingual = false        # true: without a language, detected again on every request of a file
    budget = 7                  # proposals per verification, 1..64
    align_window = 8
    timestamps = "segment"      # Whisper's timestamp tokens and segments; "none": plain text (unset: by the output)
    prompt = "as2d, Whisper"    # Whisper's previous-text prompt (initial_prompt)
    hotwords = "CTranslate2"    # before the previous text of every window (faster-whisper's hotwords)
    condition_on_previous_text = false  # true: each window prompted with the text before it
    on_missing_device = "error" # or "cpu"
    [target]
    model = "whisper-base"
    backend = "onnxruntime"
    device = "cpu"
    threads = 2                 # target alone
    shared_threads = 1          # target while the drafter runs
    [source]
    name = "whisper-tiny.en"
    backend = "onnxruntime"
    device = "cpu"
    threads = 1
    publication_size = 2
    nice = 0                    # niceness added to the drafter's threads (0..19; Linux, Android)
    guess_nice = 19             # ... on a request that names no language: a guess yields the CPU to the target
    process = false             # true: run the drafter in its own process (targets that hold the GIL)
    [device_profile]
    name = "this machine"
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import attrs

from as2d_core.setup import catalog
from as2d_core.contracts import TASKS
from as2d_core.decode.methods import UnknownMethod, get_method, method_names
from as2d_core.decode.options import DecodeOptions, out_of_range
from as2d_core.setup.options import config_keys, config_schema, options_from_config
from as2d_core.setup.plugins import Registry, load_registry
from as2d_core.setup.source_spec import SourceSpec

ON_MISSING_DEVICE = ("error", "cpu")

# key -> (type, required, allowed values or None); tables map to their own schema
_TOP: dict[str, tuple] = {
    "task": (str, False, TASKS),
    "language": (str, False, None),
    "instruction": (str, False, None),
    "method": (str, False, None),  # a registered method (plugins may add some): checked in ``parse``
    "on_missing_device": (str, False, ON_MISSING_DEVICE),
}
_TABLES: dict[str, dict[str, tuple]] = {
    "target": {
        "model": (str, True, None),
        "backend": (str, False, None),
        "device": (str, False, None),
    },
    "source": {
        "name": (str, True, None),
        "backend": (str, False, None),
        "device": (str, False, None),
        "process": (bool, False, None),
    },
    "device_profile": {
        "name": (str, True, None),
        "description": (str, False, None),
    },
}
_REQUIRED_TABLES = ("target",)
# The decoding options' keys come from their one declaration (as2d_core.decode.options), with their bounds.
for _table, _keys in config_schema().items():
    (_TABLES[_table] if _table else _TOP).update({k: (kind, False, choices) for k, (kind, _lo, _hi, choices) in _keys.items()})


@attrs.frozen
class TargetConfig:
    """Which target, on which backend and device; its threads are decoding options (``Config.decode``)."""

    model: str
    backend: str | None = None
    device: str = "cpu"


@attrs.frozen
class SourceConfig:
    """Which drafter, on which backend and device, and where it runs; its threads, niceness and
    publication size are decoding options (``Config.decode``)."""

    name: str
    backend: str | None = None
    device: str = "cpu"
    process: bool = False  # run the drafter in its own process (targets whose runtime holds the GIL)

    @property
    def spec(self) -> SourceSpec:
        return SourceSpec(self.name, in_process=not self.process)


@attrs.frozen
class Config:
    """A validated configuration. Every decoding option's key (``budget``, ``target.threads``, ...) lands in
    ``decode``, what the engine takes, so a new option is declared in ``options`` alone."""

    path: Path
    target: TargetConfig
    source: SourceConfig | None = None
    task: str = "asr"
    language: str | None = None
    instruction: str | None = None
    method: str = "as2d"
    on_missing_device: str = "error"
    device_profile: dict | None = None
    decode: DecodeOptions = DecodeOptions()


@attrs.define
class Report:
    """The outcome of checking one file."""

    path: Path
    config: Config | None = None
    errors: list[str] = attrs.Factory(list)  # the file is wrong
    missing: list[str] = attrs.Factory(list)  # the file is fine, this machine lacks something
    warnings: list[str] = attrs.Factory(list)  # taken fallbacks and other things a user must see
    devices: dict[str, str] = attrs.Factory(dict)  # "target"/"source" -> device that will really be used

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def runnable(self) -> bool:
        return not self.errors and not self.missing

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "ok": self.ok, "runnable": self.runnable, "errors": self.errors,
            "missing": self.missing, "warnings": self.warnings, "devices": self.devices,
        }


class ConfigError(ValueError):
    """A configuration that is wrong (``problems``) or cannot run here; the message lists them all."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(f"{path}: {p}" for p in problems))


def _type_name(kind: type | tuple) -> str:
    if isinstance(kind, tuple):
        return "a number, a list of numbers or a string" if list in kind else "a string or an integer"
    return {str: "a string", int: "an integer", bool: "true or false", float: "a number"}[kind]


def _check_table(values: dict, schema: dict[str, tuple], prefix: str, errors: list[str]) -> dict:
    clean = {}
    where = f"[{prefix[:-1]}]" if prefix else "the top level"
    for key, value in values.items():
        dotted = prefix + key
        if key not in schema:
            allowed = ", ".join(list(schema) + ([] if prefix else [f"[{t}]" for t in _TABLES]))
            errors.append(f"{dotted}: unknown key; allowed in {where}: {allowed}")
            continue
        kind, _required, choices = schema[key]
        accepted = (int, float) if kind is float else kind
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accepted):
            errors.append(f"{dotted}: must be {_type_name(kind)}, got {value!r}")
            continue
        if choices is not None and value not in choices:
            errors.append(f"{dotted}: {value!r} is not allowed; choose one of {', '.join(choices)}")
            continue
        clean[key] = value
    for key, (_kind, required, _choices) in schema.items():
        if required and key not in values:
            errors.append(f"{prefix}{key}: required in {where}")
    return clean


def parse(data: dict, path: Path) -> tuple[Config | None, list[str]]:
    """Structural checks only (keys, types, ranges, a registered method); no catalog lookups."""
    errors: list[str] = []
    top = {k: v for k, v in data.items() if not (k in _TABLES and isinstance(v, dict))}
    clean = _check_table(top, _TOP, "", errors)
    for name in _REQUIRED_TABLES:
        if name not in data:
            errors.append(f"{name}: required table [{name}] is missing")
    tables = {}
    for name, schema in _TABLES.items():
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            errors.append(f"{name}: must be a table [{name}], got {value!r}")
            continue
        tables[name] = _check_table(value, schema, f"{name}.", errors)
    for table, keys in config_schema().items():
        values = tables.get(table, {}) if table else clean
        for key, (_kind, low, high, _choices) in keys.items():
            why = out_of_range(values[key], low, high) if key in values and (low, high) != (None, None) else None
            if why:
                errors.append(f"{table + '.' if table else ''}{key}: {why}")
    if errors or "model" not in tables.get("target", {}):
        return None, errors
    decode = {}  # the decoding options' dotted keys, taken out of their tables
    for key in config_keys().values():
        table, _, name = key.rpartition(".")
        values = tables.get(table, {}) if table else clean
        if name in values:
            decode[key] = values.pop(name)
    source = SourceConfig(**tables["source"]) if "name" in tables.get("source", {}) else None
    method = clean.pop("method", "as2d" if source else "target-only")
    try:  # a built-in method without asking the plugins; another must be registered by one
        needs_source = get_method(method).needs_source
    except UnknownMethod:
        errors.append(f"method: {method!r} is not allowed; choose one of {', '.join(method_names())}")
        return None, errors
    if needs_source and source is None:
        errors.append(f"method: {method!r} needs a [source] table; use method = \"target-only\" without one")
        return None, errors
    try:  # a value the option's converter refuses (temperature = -1, batch_windows = 0): the file's error
        options = options_from_config(decode)
    except ValueError as exc:
        return None, errors + [str(exc)]
    return Config(path=path, target=TargetConfig(**tables["target"]), source=source, method=method,
                  device_profile=tables.get("device_profile"), decode=options, **clean), errors


def _serves(entry: catalog.Entry, key: str, value: str) -> bool:
    allowed = entry.info.get(key)
    return allowed is None or value in allowed


def _check_part(config: Config, role: str, name: str, backend: str | None, device: str,
                registry: Registry, report: Report) -> tuple[catalog.Entry | None, str | None]:
    """Checks of one part against what its plugin registers; returns its entry and the backend it will run on."""
    kind = "target" if role == "target" else "source"
    key = f"{role}.model" if role == "target" else f"{role}.name"
    entry = catalog.lookup(kind, name, registry)
    if entry is None:
        known = ", ".join(e.name for e in catalog.entries(kind, registry))
        report.errors.append(f"{key}: unknown {kind} {name!r}; known {kind}s: {known}")
        return None, None
    if entry.installed:
        backend = _check_registered_facts(config, role, entry, backend, report)
    if backend is not None:
        backend_entry = catalog.lookup("backend", backend, registry)
        if backend_entry is None:
            report.errors.append(f"{role}.backend: unknown backend {backend!r}")
            return entry, None
        devices = backend_entry.info.get("devices")
        if devices and device not in devices:
            report.errors.append(f"{role}.device: {device!r} is not a device of {backend}; allowed: {', '.join(devices)}")
    return entry, backend


def _check_registered_facts(config: Config, role: str, entry: catalog.Entry, backend: str | None,
                            report: Report) -> str | None:
    """Task, language and backend against what the part's plugin registers; returns the backend it will run on."""
    kind, name = entry.kind, entry.name
    if not _serves(entry, "tasks", config.task) and kind == "source":  # as the engine does: target-only, said
        report.warnings.append(f"task: source {name!r} does not draft {config.task!r} (it drafts "
                               f"{', '.join(entry.info['tasks'])}); requests run target-only")
    elif not _serves(entry, "tasks", config.task):
        report.errors.append(f"task: {kind} {name!r} does not do {config.task!r}; it does {', '.join(entry.info['tasks'])}")
    if config.language and not _serves(entry, "languages", config.language):
        report.errors.append(
            f"language: {kind} {name!r} does not serve {config.language!r}; it serves {', '.join(entry.info['languages'])}"
        )
    backends = entry.info.get("backends") or ()
    if backend is None:
        return catalog.default_backend(entry)
    if backends and backend not in backends:
        report.errors.append(f"{role}.backend: {name!r} does not run on {backend!r}; allowed: {', '.join(backends)}")
        return None
    if not backends and "backends" in entry.info:
        report.errors.append(f"{role}.backend: {name!r} brings its own runtime; remove {role}.backend")
        return None
    return backend


def _check_here(config: Config, role: str, entry: catalog.Entry, backend: str | None, device: str,
                registry: Registry, report: Report) -> None:
    """What this machine lacks to run one part, and which device it will really use."""
    if not entry.installed:
        report.missing.append(f"{role}: {catalog.not_installed_reason(entry, registry)}")
    else:
        folder, missing = catalog.missing_files(entry, backend=backend)
        if missing:
            report.missing.append(f"{role}: {catalog.files_reason(entry, folder, missing)}")
    report.devices[role] = device
    if backend is None:
        return
    backend_entry = catalog.lookup("backend", backend, registry)
    if not backend_entry.installed:
        report.missing.append(f"{role}.backend: {catalog.not_installed_reason(backend_entry, registry)}")
        return
    devices = catalog.probe_devices(backend_entry)
    why = devices.get(device, f"{backend} does not report device {device!r}")
    if why is None:
        return
    cpu_why = devices.get("cpu", f"{backend} does not report device 'cpu'")
    if device == "cpu":
        report.missing.append(f"{role}.device: {backend} cannot run on 'cpu' here: {why}")
    elif config.on_missing_device == "cpu" and cpu_why is None:
        report.warnings.append(
            f"{role}.device: {device!r} does not run here on {backend} ({why}); "
            f"running on cpu because on_missing_device = \"cpu\""
        )
        report.devices[role] = "cpu"
    elif config.on_missing_device == "cpu":
        report.missing.append(f"{role}.device: neither {device!r} ({why}) nor the cpu fallback ({cpu_why}) runs here on {backend}")
    else:
        report.missing.append(
            f"{role}.device: {device!r} does not run here on {backend} ({why}); "
            f"on_missing_device = \"error\" (set it to \"cpu\" to run on CPU instead)"
        )


def check_data(data: dict, path: Path, registry: Registry | None = None) -> Report:
    """Check a parsed configuration: structure, catalog consistency, and what this machine lacks."""
    registry = registry if registry is not None else load_registry()
    report = Report(path=path)
    config, report.errors = parse(data, path)
    if config is None:
        return report
    target, target_backend = _check_part(
        config, "target", config.target.model, config.target.backend, config.target.device, registry, report)
    source = source_backend = None
    if config.source is not None:
        source, source_backend = _check_part(
            config, "source", config.source.name, config.source.backend, config.source.device, registry, report)
    if target is not None and source is not None and target.installed and source.installed:
        problem = catalog.pair_problem(source, target, catalog.entries("bridge", registry))
        if problem is not None:
            report.errors.append(f"source.name: {problem}")
    if report.errors:
        return report
    report.config = attrs.evolve(
        config,
        target=attrs.evolve(config.target, backend=target_backend),
        source=attrs.evolve(config.source, backend=source_backend) if config.source else None,
    )
    _check_here(config, "target", target, target_backend, config.target.device, registry, report)
    if source is not None and get_method(config.method).needs_source:
        _check_here(config, "source", source, source_backend, config.source.device, registry, report)
    return report


def read(path: Path) -> dict:
    """The TOML data of ``path``; a syntax error becomes a ConfigError that names the file."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(path, ["no such file"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, [f"not valid TOML: {exc}"]) from None


def check_file(path: Path | str, registry: Registry | None = None, overrides: dict | None = None) -> Report:
    """Check one file; ``overrides`` (dotted keys, e.g. ``"target.device"``) replace its values first."""
    path = Path(path)
    try:
        data = read(path)
    except ConfigError as exc:
        return Report(path=path, errors=exc.problems)
    return check_data(set_values(data, overrides or {}), path, registry)


def set_values(data: dict, values: dict[str, Any]) -> dict:
    """``data`` (parsed TOML) with each dotted key of ``values`` (``"target.device"``) set."""
    for dotted, value in values.items():
        table, _, key = dotted.rpartition(".")
        (data.setdefault(table, {}) if table else data)[key] = value
    return data
