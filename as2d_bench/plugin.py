"""Attaches ``as2d bench`` to the ``as2d`` command, the same way any plugin adds a command."""
from as2d_core.setup.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    from .cli import bench

    cli.add_command(bench)
