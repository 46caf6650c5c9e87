"""Where converted model folders live (``$AS2D_MODELS_DIR`` or ``~/.local/share/as2d/models``), and their checks."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

ENV_MODELS_DIR = "AS2D_MODELS_DIR"


def models_dir() -> Path:
    value = os.environ.get(ENV_MODELS_DIR)
    return Path(value).expanduser() if value else Path.home() / ".local" / "share" / "as2d" / "models"


class ModelFilesMissing(FileNotFoundError):
    """A model folder is absent or incomplete; the message names the files and the expected layout."""


def absent_files(folder: Path, required: Sequence[str], alternatives: Mapping[str, Sequence[str]] | None = None
                 ) -> list[str]:
    """The ``required`` files not in ``folder``; a file may have stand-ins (``alternatives``), as a sharded
    checkpoint has model.safetensors.index.json instead of model.safetensors."""
    alternatives = alternatives or {}
    return [name for name in required
            if not any((folder / f).is_file() for f in (name, *alternatives.get(name, ())))]


def check_folder(folder: str | Path, required: Sequence[str], layout: str, what: str = "", hint: str = "") -> Path:
    """The folder, or an error naming every missing file and the layout it must have (never the runtime's own
    error, which would not say how to fix it). ``what`` names the model, ``hint`` the command that makes it."""
    folder = Path(folder).expanduser()
    name = f"{what} model folder" if what else "model folder"
    fix = f"; {hint}" if hint else ""
    if not folder.is_dir():
        raise ModelFilesMissing(
            f"{name} {folder} does not exist; expected layout: {layout}; files: {', '.join(required)}{fix}")
    missing = absent_files(folder, required)
    if missing:
        raise ModelFilesMissing(f"{name} {folder} lacks {', '.join(missing)}; expected layout: {layout}{fix}")
    return folder
