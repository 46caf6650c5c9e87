"""as2d hooks of the Qwen3-ASR plugin (importing this imports neither torch nor MNN)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from as2d_core.setup.hookspecs import hookimpl

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.json",
                  "merges.txt", "preprocessor_config.json")
SHARDED = {"model.safetensors": ("model.safetensors.index.json",)}  # a sharded checkpoint holds an index instead
LAYOUT = ("the Hugging Face checkpoint folder of Qwen/{repo} (config.json with thinker_config, model.safetensors, "
          "the Qwen2 tokenizer files, preprocessor_config.json), loaded on torch through qwen-asr")
INSTALL = "pip install ./plugins/lm './plugins/qwen3_asr[torch]'"
TORCH_NOTES = {"cuda": "scripts/constraints.txt pins the CPU build of torch; CUDA needs a CUDA build of torch and a GPU"}


def _options(options: dict, folder: str) -> dict:
    return dict(folder=Path(options["models_dir"]) / folder, backend=options.get("backend") or "torch",
                device=options.get("device") or "cpu", max_new_tokens=options.get("max_new_tokens", 512),
                dtype=options.get("dtype", "float32"), context=options.get("context", ""), name=options.get("name"))


def _target(options: dict):
    from .model import Qwen3ASRTarget

    return Qwen3ASRTarget(**_options(options, "qwen3-asr-1.7b"))


def _source(options: dict):
    from .model import Qwen3ASRSource

    return Qwen3ASRSource(**_options(options, "qwen3-asr-0.6b"))


COMMON = dict(tasks=("asr",), languages=None, vocabulary="qwen3-asr", backends=("torch", "mnn"),
              required_files=REQUIRED_FILES, file_alternatives=SHARDED, install=INSTALL)


@hookimpl
def register_targets(register):
    register("qwen3-asr-1.7b", _target, description="Qwen3-ASR-1.7B (the paper's ASR target) on torch via qwen-asr",
             model_dir="qwen3-asr-1.7b", layout=LAYOUT.format(repo="Qwen3-ASR-1.7B"), **COMMON)


@hookimpl
def register_sources(register):
    register("qwen3-asr-0.6b", _source, description="Qwen3-ASR-0.6B drafter on torch, shares the 1.7B tokenizer",
             model_dir="qwen3-asr-0.6b", layout=LAYOUT.format(repo="Qwen3-ASR-0.6B"), **COMMON)


def torch_probe() -> dict[str, str | None]:
    """torch runs Qwen3-ASR here when torch and qwen-asr import; CUDA only when torch sees a GPU."""
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("qwen_asr") is None:
        return {"cpu": f"torch or qwen-asr is not installed: {INSTALL}", "cuda": "torch is not installed"}
    import torch

    return {"cpu": None, "cuda": None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA GPU"}


@hookimpl
def register_backends(register):
    try:
        register("torch", torch_probe, devices=("cpu", "cuda"), notes=TORCH_NOTES, install=INSTALL,
                 description="PyTorch (transformers), for Qwen3-ASR (through qwen-asr) and Qwen2.5-Omni")
    except ValueError:  # one torch backend serves both Qwen plugins: the omni plugin registered it already
        pass
