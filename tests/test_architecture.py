"""The architecture contracts in pyproject.toml ([tool.importlinter]) hold.

The core never imports a plugin, a model runtime or its own clients (bench, tuning); the clients and
scripts/ import no plugin and no model runtime (peers come through a hook); bridges import no plugin;
plugins never import the clients nor the core's command line; tuning sits above bench, bench above the
core. Inside the core, ``contracts`` imports nothing else of it, ``decode`` neither ``input`` nor
``cli``, and only ``cli`` imports ``cli``. Run here as well as in CI so that the README's test command
checks them too.
"""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    if not lint_imports.is_file():
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    run = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
