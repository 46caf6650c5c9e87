"""as2d hooks of the Omni plugin (importing this imports neither MNN nor torch)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from as2d_core.setup.hookspecs import hookimpl

# The MNN export and the Hugging Face checkpoint share only config.json (with different contents): the
# catalog checks each backend's own files; loading checks the full list (weight shards, chat template).
REQUIRED_FILES = ("config.json",)
MNN_FILES = ("llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "audio.mnn")
TORCH_FILES = ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json")
SHARDED = {"model.safetensors": ("model.safetensors.index.json",)}  # a sharded checkpoint holds an index instead
BACKEND_FILES = {"mnn": MNN_FILES, "torch": TORCH_FILES}
LAYOUT = ("for backend 'mnn' (default): a folder exported by MNN's llmexport from Qwen/{repo} (transformers 4.x; "
          "`--export mnn`) with config.json, " + ", ".join(MNN_FILES) + "; llm_config.json must carry the audio_pad, "
          "audio_start and audio_end ids (see docs/paper-models.md); for backend 'torch': the Hugging Face checkpoint "
          "folder of Qwen/{repo} as published, with config.json, model.safetensors (or model.safetensors.index.json "
          "and its shards), " + ", ".join(TORCH_FILES[1:]) + ", chat_template.json (or .jinja)")
INSTALL = "pip install ./plugins/lm ./plugins/mnn ./plugins/omni"
TORCH_INSTALL = "pip install ./plugins/lm ./plugins/mnn './plugins/omni[torch]'"
TORCH_NOTES = {"cuda": "scripts/constraints.txt pins the CPU build of torch; CUDA needs a CUDA build of torch and a GPU"}
TORCH_DESCRIPTION = "PyTorch (transformers), for Qwen3-ASR (through qwen-asr) and Qwen2.5-Omni"


def _options(options: dict, folder: str) -> dict:
    return dict(folder=Path(options["models_dir"]) / folder, backend=options.get("backend") or "mnn",
                device=options.get("device") or "cpu", threads=options.get("threads") or 1,
                max_new_tokens=options.get("max_new_tokens", 512), target_language=options.get("target_language", "zh"),
                name=options.get("name"), dtype=options.get("dtype", "float32"))


def _target(options: dict):
    from .model import OmniTarget

    return OmniTarget(**_options(options, "qwen2.5-omni-7b"))


def _source(options: dict):
    from .model import OmniSource

    return OmniSource(**_options(options, "qwen2.5-omni-3b"))


COMMON = dict(tasks=("asr", "translate", "qa"), languages=None, vocabulary="qwen2.5-omni", backends=("mnn", "torch"),
              required_files=REQUIRED_FILES, backend_files=BACKEND_FILES,
              file_alternatives=SHARDED, install=INSTALL)


@hookimpl
def register_targets(register):
    register("qwen2.5-omni-7b", _target,
             description="Qwen2.5-Omni-7B thinker on MNN's LLM engine or torch (paper's translation/QA target)",
             model_dir="qwen2.5-omni-7b", layout=LAYOUT.format(repo="Qwen2.5-Omni-7B"), **COMMON)


@hookimpl
def register_sources(register):
    register("qwen2.5-omni-3b", _source,
             description="Qwen2.5-Omni-3B thinker drafter on MNN or torch, shares the 7B tokenizer",
             model_dir="qwen2.5-omni-3b", layout=LAYOUT.format(repo="Qwen2.5-Omni-3B"), **COMMON)


def torch_probe() -> dict[str, str | None]:
    """torch runs Qwen2.5-Omni here when torch and transformers import; CUDA only when torch sees a GPU."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None:
        return {"cpu": f"torch or transformers is not installed: {TORCH_INSTALL}", "cuda": "torch is not installed"}
    import torch

    return {"cpu": None, "cuda": None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA GPU"}


# One torch backend serves both Qwen plugins, so each skips it if the other registered it already. The core
# registers in pluggy's listing order, where tryfirst implementations come last: the qwen3_asr plugin (which
# the catalog names as the backend's owner) registers it first when it is loaded.
@hookimpl(tryfirst=True)
def register_backends(register):
    try:
        register("torch", torch_probe, description=TORCH_DESCRIPTION, devices=("cpu", "cuda"), notes=TORCH_NOTES,
                 install=TORCH_INSTALL)
    except ValueError:  # registered by the qwen3_asr plugin
        pass
