"""``as2d peers install NAME``: the environment of an outside peer that cannot run inside as2d's own.

CrisperWhisper's CTranslate2 fork replaces the ``ctranslate2`` module as2d uses, so ``crisperwhisper-sd``
runs in a virtual environment of its own, beside the models folder (see ``crisper``).
"""
from __future__ import annotations

import sys

import click

ENVIRONMENTS = ("crisperwhisper",)


@click.group("peers")
def peers():
    """Environments of the outside peers that `as2d bench` measures beside as2d."""


@peers.command("install")
@click.argument("name", type=click.Choice(ENVIRONMENTS))
@click.option("--force", is_flag=True, help="Make the environment again even if it is ready.")
def install(name: str, force: bool):
    """Make NAME's own environment: crisperwhisper installs ctranslate2-crisperwhisper (and numpy) from the
    package index into peers/crisperwhisper/venv beside the models folder (needs the network)."""
    from .crisper import PeerEnvError, install_env

    try:
        install_env(force=force, log=lambda line: click.echo(line, err=True))
    except PeerEnvError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
