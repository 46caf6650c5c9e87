"""Plugin discovery: one pluggy manager, entry points of group ``as2d``.

``AS2D_PLUGINS`` restricts which entry-point plugins load (a comma-separated
allowlist of entry-point names; empty means none), so tests can run against a
known set. Without it every installed plugin loads. The core distribution's own
clients (``bench``, ``tuning``, ``serve``) attach through the same entry points and
hooks but are not plugins, so the allowlist does not apply to them. A plugin that
fails to import is recorded, not fatal: listings must still tell the truth about the rest.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from importlib import metadata
from typing import Any

import attrs
import pluggy

from as2d_core.decode import methods
from as2d_core.setup import hookspecs

GROUP = "as2d"
ENV_ALLOWLIST = "AS2D_PLUGINS"
BUILTINS = "as2d.builtins"
CORE_DISTRIBUTION = "as2d"


@attrs.frozen
class Part:
    """One registered target, source, backend, bridge, model installer, speech detector, outside peer or
    decoding method (whose ``factory`` is the ``decode.methods.Method`` itself)."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    info: dict = attrs.field(factory=dict)


class UnknownPart(LookupError):
    """A name that no installed plugin registers; the message lists what is installed."""


@attrs.define
class Registry:
    """Everything the loaded plugins registered, plus what was installed but not loaded."""

    parts: dict[tuple[str, str], Part] = attrs.Factory(dict)
    plugins: list[dict] = attrs.Factory(list)
    skipped: dict[str, str] = attrs.Factory(dict)  # entry-point name -> why it did not load
    manager: pluggy.PluginManager | None = None  # the one that filled it (plugins add CLI commands through it)

    def add(self, kind: str, plugin: str, name: str, factory: Callable, info: dict) -> None:
        key = (kind, name)
        if key in self.parts:
            raise ValueError(f"{kind} {name!r} is registered twice ({self.parts[key].plugin} and {plugin})")
        self.parts[key] = Part(kind, name, factory, plugin, info)

    def find(self, kind: str, name: str) -> Part | None:
        return self.parts.get((kind, name))

    def names(self, kind: str) -> list[str]:
        return sorted(name for k, name in self.parts if k == kind)

    def get(self, kind: str, name: str) -> Part:
        try:
            return self.parts[(kind, name)]
        except KeyError:
            installed = ", ".join(self.names(kind)) or "none"
            raise UnknownPart(f"unknown {kind} {name!r}; installed {kind}s: {installed}") from None


def _allowed() -> set[str] | None:
    value = os.environ.get(ENV_ALLOWLIST)
    if value is None:
        return None
    return {item.strip() for item in value.split(",") if item.strip()}


def plugin_manager() -> tuple[pluggy.PluginManager, dict[str, tuple[str | None, str | None]], dict[str, str]]:
    """The manager with built-ins and allowed entry points; each plugin's distribution and version; what was skipped."""
    manager = pluggy.PluginManager(GROUP)
    manager.add_hookspecs(hookspecs)
    from as2d_core.setup import builtins

    manager.register(builtins, name=BUILTINS)
    distributions = {BUILTINS: (CORE_DISTRIBUTION, _version(CORE_DISTRIBUTION))}
    skipped: dict[str, str] = {}
    allowed = _allowed()
    for entry_point in metadata.entry_points(group=GROUP):
        if manager.has_plugin(entry_point.name):
            continue
        own_client = entry_point.dist is not None and entry_point.dist.name == CORE_DISTRIBUTION
        if allowed is not None and entry_point.name not in allowed and not own_client:
            skipped[entry_point.name] = f"installed but not loaded ({ENV_ALLOWLIST}={os.environ[ENV_ALLOWLIST]!r})"
            continue
        try:
            module = entry_point.load()
        except Exception as exc:  # a broken plugin must not hide the others
            skipped[entry_point.name] = f"failed to load: {type(exc).__name__}: {exc}"
            continue
        manager.register(module, name=entry_point.name)
        dist = entry_point.dist
        distributions[entry_point.name] = (dist.name, dist.version) if dist else (None, None)
    return manager, distributions, skipped


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


_REGISTRY: Registry | None = None


def load_registry(refresh: bool = False) -> Registry:
    """Ask every plugin to register its parts (cached per process)."""
    global _REGISTRY
    if _REGISTRY is not None and not refresh:
        return _REGISTRY
    manager, distributions, skipped = plugin_manager()
    registry = Registry(skipped=skipped, manager=manager)
    hooks = {
        "target": manager.hook.register_targets,
        "source": manager.hook.register_sources,
        "backend": manager.hook.register_backends,
        "bridge": manager.hook.register_bridges,
        "model": manager.hook.register_models,
        "detector": manager.hook.register_detectors,
        "peer": manager.hook.register_peers,
        "method": manager.hook.register_methods,
    }
    failed: dict[str, str] = {}
    for kind, hook in hooks.items():
        for impl in hook.get_hookimpls():
            plugin_name = manager.get_name(impl.plugin)

            if kind == "method":  # a method is data, not built: ``register(method)``, held as the part's factory
                def register(method, _plugin=plugin_name):
                    registry.add("method", _plugin, method.name, method, {"description": method.description})
            else:
                def register(name, factory, _kind=kind, _plugin=plugin_name, **info):
                    registry.add(_kind, _plugin, name, factory, info)

            try:
                impl.function(register=register)
            except Exception as exc:  # recorded per plugin and shown by ``as2d plugins list``
                failed.setdefault(plugin_name, f"{type(exc).__name__}: {exc}")
    for name, _plugin in manager.list_name_plugin():
        dist_name, version = distributions.get(name, (None, None))
        parts = sorted(f"{part.kind}:{part.name}" for part in registry.parts.values() if part.plugin == name)
        registry.plugins.append(
            {"name": name, "distribution": dist_name, "version": version, "parts": parts, "error": failed.get(name)}
        )
    registry.plugins.sort(key=lambda p: p["name"])
    _REGISTRY = registry
    return registry


def register_commands(cli) -> None:
    """Let every loaded plugin add its own commands to the ``as2d`` group."""
    load_registry().manager.hook.register_commands(cli=cli)


def registered_methods() -> dict[str, methods.Method]:
    """Every registered decoding method by name (the built-ins register through the same hook)."""
    registry = load_registry()
    return {name: registry.get("method", name).factory for name in registry.names("method")}


methods.take_registered(registered_methods)  # the registry hands decoding its methods; decode never imports setup


def registered_source(name: str, options: dict) -> Any:
    """Build the registered source ``name``: what a drafter process (``workers.process_source``) is given to run."""
    return load_registry().get("source", name).factory(options)
