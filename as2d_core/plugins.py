"""Plugin discovery: one pluggy manager, entry points of group ``as2d``.

``AS2D_PLUGINS`` restricts which entry-point plugins load (a comma-separated
allowlist; empty means none), so tests can run against a known set.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from importlib import metadata
from typing import Any

import attrs
import pluggy

from . import hookspecs

GROUP = "as2d"
ENV_ALLOWLIST = "AS2D_PLUGINS"


@attrs.frozen
class Part:
    """One registered target, source, backend, bridge or model installer."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    info: dict = attrs.field(factory=dict)


class UnknownPart(LookupError):
    """A name that no installed plugin registers; the message lists what is installed."""


@attrs.define
class Registry:
    parts: dict[tuple[str, str], Part] = attrs.Factory(dict)
    plugins: list[dict] = attrs.Factory(list)

    def add(self, kind: str, plugin: str, name: str, factory: Callable, info: dict) -> None:
        key = (kind, name)
        if key in self.parts:
            raise ValueError(f"{kind} {name!r} is registered twice ({self.parts[key].plugin} and {plugin})")
        self.parts[key] = Part(kind, name, factory, plugin, info)

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


def plugin_manager() -> tuple[pluggy.PluginManager, dict[str, tuple[str | None, str | None]]]:
    """The manager with built-ins and allowed entry points, and each plugin's distribution and version."""
    manager = pluggy.PluginManager(GROUP)
    manager.add_hookspecs(hookspecs)
    from . import builtins

    manager.register(builtins, name="as2d.builtins")
    distributions = {"as2d.builtins": ("as2d", _version("as2d"))}
    allowed = _allowed()
    for entry_point in metadata.entry_points(group=GROUP):
        if (allowed is not None and entry_point.name not in allowed) or manager.has_plugin(entry_point.name):
            continue
        manager.register(entry_point.load(), name=entry_point.name)
        dist = entry_point.dist
        distributions[entry_point.name] = (dist.name, dist.version) if dist else (None, None)
    return manager, distributions


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
    manager, distributions = plugin_manager()
    registry = Registry()
    hooks = {
        "target": manager.hook.register_targets,
        "source": manager.hook.register_sources,
        "backend": manager.hook.register_backends,
        "bridge": manager.hook.register_bridges,
        "model": manager.hook.register_models,
    }
    for kind, hook in hooks.items():
        for impl in hook.get_hookimpls():
            plugin_name = manager.get_name(impl.plugin)

            def register(name, factory, _kind=kind, _plugin=plugin_name, **info):
                registry.add(_kind, _plugin, name, factory, info)

            impl.function(register=register)
    for name, _plugin in manager.list_name_plugin():
        dist_name, version = distributions.get(name, (None, None))
        registry.plugins.append({"name": name, "distribution": dist_name, "version": version})
    registry.plugins.sort(key=lambda p: p["name"])
    _REGISTRY = registry
    return registry


def register_commands(cli) -> None:
    manager, _ = plugin_manager()
    manager.hook.register_commands(cli=cli)
