"""Export a SenseVoice Small PyTorch checkpoint folder to model.onnx in place (needs funasr)."""
from __future__ import annotations

from pathlib import Path


def export_checkpoint(folder: str | Path) -> Path:
    """``folder`` holds config.yaml, model.pt, am.mvn and the bpe model; funasr writes model.onnx next to them."""
    try:
        from funasr import AutoModel
    except ImportError as exc:
        raise RuntimeError(
            "exporting the SenseVoice PyTorch checkpoint needs funasr: install torch==2.13.0 (CPU) first, then "
            "`pip install './plugins/sensevoice[funasr]'`"
        ) from exc
    folder = Path(folder)
    if not (folder / "model.pt").is_file():
        raise FileNotFoundError(f"{folder} has no model.pt to export")
    model = AutoModel(model=str(folder), disable_update=True, device="cpu")  # a local path: no hub lookup
    model.export(type="onnx", quantize=False, output_dir=str(folder))
    return folder / "model.onnx"
