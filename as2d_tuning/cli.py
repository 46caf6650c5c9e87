"""``as2d profile``, ``as2d replay`` and ``as2d select``: the tuning commands, one module each.

Attached to ``as2d`` through the ``register_commands`` hook (``as2d_tuning.plugin``).
"""
from __future__ import annotations

import click

from .profile_command import profile
from .replay_command import replay
from .select_command import select

COMMANDS = (profile, replay, select)


@click.group()
def _main() -> None:
    """Tuning commands (before the core attaches them to ``as2d``)."""


for _command in COMMANDS:
    _main.add_command(_command)

if __name__ == "__main__":
    _main()
