"""Attaches ``as2d profile``, ``as2d replay`` and ``as2d select`` to the ``as2d`` command, as a plugin would."""
from as2d_core.setup.hookspecs import hookimpl


@hookimpl
def register_commands(cli):
    from .cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)
