"""Where converted model folders live (``$AS2D_MODELS_DIR`` or ``~/.local/share/as2d/models``), and their checks."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

ENV_MODELS_DIR = "AS2D_MODELS_DIR"


def models_dir() -> Path:
    value = os.environ.get(ENV_MODELS_DIR)
    return Path(value).expanduser() if value else Path.home() / ".local" / "share" / "as2d" / "models"


def check_folder(folder: Path, required: Sequence[str], layout: str, what: str) -> None:
    """Raise an error naming every missing file and the layout the folder must have (not the runtime's own error)."""
    missing = [name for name in required if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{what} model folder {folder} lacks {', '.join(missing)}; expected layout: {layout}")
