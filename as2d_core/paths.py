"""Where converted model folders live: ``$AS2D_MODELS_DIR`` or ``~/.local/share/as2d/models``."""
from __future__ import annotations

import os
from pathlib import Path

ENV_MODELS_DIR = "AS2D_MODELS_DIR"


def models_dir() -> Path:
    value = os.environ.get(ENV_MODELS_DIR)
    return Path(value).expanduser() if value else Path.home() / ".local" / "share" / "as2d" / "models"
