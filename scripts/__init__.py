"""Measurement and stress scripts, run as ``python scripts/NAME.py``; a package only so that import-linter
checks them as clients of the core (``[tool.importlinter]`` in pyproject.toml)."""
