"""Run MNN's exporter (PyPI ``llmexport`` 0.0.5) offline on an HF folder.

As shipped it does not import (its modules say ``from utils...``, so its own folder
must be on ``sys.path``), and its converter imports MNN's usage logger, which
pip-installs an SDK and contacts a remote endpoint. We run it in a child process
with its folder on ``sys.path`` and an empty stand-in for ``MNN.tools.utils.log``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import sys, types, importlib.util
folder = importlib.util.find_spec("llmexport").submodule_search_locations[0]
sys.path.insert(0, folder)
log = types.ModuleType("MNN.tools.utils.log")
log.mnn_logger = None  # stand-in: no SDK install, no usage upload
sys.modules["MNN.tools.utils.log"] = log
sys.argv = ["llmexport"] + sys.argv[1:]
path = folder + "/llmexport.py"
code = compile(open(path).read(), path, "exec")
exec(code, {"__name__": "__main__", "__file__": path})  # not runpy: the exporter empties sys.argv
"""

# What the as2d plugins read from an export (the ONNX intermediates are dropped).
KEEP = ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok", "tokenizer.txt",
        "embeddings_bf16.bin", "audio.mnn", "audio.mnn.weight", "visual.mnn", "visual.mnn.weight")


def export_mnn(hf_dir: Path, dest: Path, quant_bit: int = 16) -> Path:
    """Export ``hf_dir`` to an MNN LLM folder at ``dest`` (16-bit weights keep argmax parity on random weights)."""
    dest = Path(dest)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", _CHILD, "--path", str(hf_dir), "--export", "mnn",
               "--quant_bit", str(quant_bit), "--dst_path", tmp]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        if run.returncode != 0 or not (Path(tmp) / "llm.mnn").is_file():
            raise RuntimeError(f"llmexport failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for name in KEEP:
            if (Path(tmp) / name).is_file():
                shutil.copyfile(Path(tmp) / name, dest / name)
        # MNN decodes token by token and cannot join the bytes of a split character: keep the HF tokenizer.json.
        shutil.copyfile(Path(hf_dir) / "tokenizer.json", dest / "tokenizer.json")
    return dest
