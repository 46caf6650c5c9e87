"""The hooks a plugin implements. Each hook receives a ``register`` callback.

A plugin is any module with ``@hookimpl`` functions, exposed through the
``as2d`` entry-point group; the core's own parts are registered the same way.
"""
import pluggy

hookspec = pluggy.HookspecMarker("as2d")
hookimpl = pluggy.HookimplMarker("as2d")


@hookspec
def register_targets(register):
    """Register target models: ``register(name, factory, **info)``; ``factory(options) -> Target``."""


@hookspec
def register_sources(register):
    """Register drafter sources: ``register(name, factory, **info)``; ``factory(options) -> Source``."""


@hookspec
def register_backends(register):
    """Register runtimes: ``register(name, probe, **info)``; ``probe() -> {device: reason-or-None}``."""


@hookspec
def register_bridges(register):
    """Register tokenizer bridges: ``register(name, factory, **info)``."""


@hookspec
def register_models(register):
    """Register installable model files: ``register(name, installer, **info)``; ``installer(models_dir)``."""


@hookspec
def register_commands(cli):
    """Add extra click commands to the ``as2d`` command group."""
