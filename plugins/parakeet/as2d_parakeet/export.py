"""Export a NeMo ``.nemo`` CTC checkpoint into the folder ``ParakeetSource`` reads (needs nemo-toolkit)."""
from __future__ import annotations

import json
from pathlib import Path


def export_nemo(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Restore the checkpoint on CPU, export ``model.onnx`` and write ``vocab.txt`` and ``config.json``."""
    try:
        from nemo.collections.asr.models import ASRModel
    except ImportError as exc:
        raise RuntimeError(
            "exporting a .nemo checkpoint needs nemo-toolkit: install torch==2.13.0 (CPU) first, then "
            "`pip install './plugins/parakeet[nemo]'`"
        ) from exc
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = ASRModel.restore_from(str(checkpoint), map_location="cpu")
    model.eval()
    model.export(str(out / "model.onnx"))
    vocab = [*model.tokenizer.vocab, "<blk>"]
    (out / "vocab.txt").write_text("".join(f"{token} {i}\n" for i, token in enumerate(vocab)), encoding="utf-8")
    config = {
        "model_type": "nemo-conformer-ctc",
        "features_size": int(model.cfg.preprocessor.features),
        "subsampling_factor": int(model.cfg.encoder.subsampling_factor),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
