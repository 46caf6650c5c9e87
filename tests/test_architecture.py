"""The architecture contracts in pyproject.toml ([tool.importlinter]) hold.

The core never imports a plugin, a model runtime or its own clients (bench, tuning); the clients and
scripts/ import no plugin and no model runtime (peers come through a hook); bridges import no plugin;
plugins never import the clients nor the core's command line; tuning sits above bench, bench above the
core. Inside the core the layers hold: contracts < capabilities < workers < decode < input < setup < cli. Run here as well
as in CI so that the README's test command checks them too. The package root stays light: a plugin or a
drafter process that imports the contracts loads no audio library, no plugin manager and no other core module.
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


# What importing the contracts must not load: the rest of the core, the audio stack, the plugin manager.
HEAVY = ("as2d_core.decode", "as2d_core.input", "as2d_core.setup", "as2d_core.workers", "as2d_core.cli",
         "av", "soxr", "pluggy", "click")


def test_importing_the_contracts_loads_nothing_heavy():
    code = "import sys, as2d_core.contracts, as2d_core.capabilities; print(' '.join(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    loaded = set(run.stdout.split())
    assert "as2d_core.contracts" in loaded
    assert [m for m in sorted(loaded) if any(m == h or m.startswith(h + ".") for h in HEAVY)] == []
