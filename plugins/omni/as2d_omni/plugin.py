"""as2d hooks of the Omni plugin (importing this never imports MNN)."""
from __future__ import annotations

from pathlib import Path

from as2d_core.hookspecs import hookimpl

REQUIRED_FILES = ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "audio.mnn")
LAYOUT = ("a folder exported by MNN's llmexport from Qwen/{repo} (transformers 4.x; `--export mnn`); "
          "llm_config.json must carry the audio_pad, audio_start and audio_end ids (see docs/paper-models.md)")
INSTALL = "pip install ./plugins/mnn ./plugins/omni"


def _options(options: dict, folder: str) -> dict:
    device = options.get("device") or "cpu"
    return dict(folder=Path(options["models_dir"]) / folder, device=device, threads=options.get("threads") or 1,
                max_new_tokens=options.get("max_new_tokens", 512), target_language=options.get("target_language", "zh"),
                name=options.get("name"))


def _target(options: dict):
    from .model import OmniTarget

    return OmniTarget(**_options(options, "qwen2.5-omni-7b"))


def _source(options: dict):
    from .model import OmniSource

    return OmniSource(**_options(options, "qwen2.5-omni-3b"))


COMMON = dict(tasks=("asr", "translate", "qa"), languages=None, vocabulary="qwen2.5-omni", backends=("mnn",),
              required_files=REQUIRED_FILES, install=INSTALL)


@hookimpl
def register_targets(register):
    register("qwen2.5-omni-7b", _target, description="Qwen2.5-Omni-7B thinker on MNN's LLM engine (paper's translation/QA target)",
             model_dir="qwen2.5-omni-7b", layout=LAYOUT.format(repo="Qwen2.5-Omni-7B"), **COMMON)


@hookimpl
def register_sources(register):
    register("qwen2.5-omni-3b", _source, description="Qwen2.5-Omni-3B thinker drafter on MNN, shares the 7B tokenizer",
             model_dir="qwen2.5-omni-3b", layout=LAYOUT.format(repo="Qwen2.5-Omni-3B"), **COMMON)
