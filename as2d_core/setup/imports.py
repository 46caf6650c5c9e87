"""Models a user brings: a checkpoint on disk converted by the plugin that reads its layout.

A plugin offers an importer as a model part with two facts: ``imports`` (the layouts it reads, in words) and
``recognizes`` (``path -> bool``). Its installer takes ``source`` (the path) and ``name``. ``as2d models install
--from`` and ``as2d.WhisperModel(PATH)`` both come here, so both name and convert a checkpoint alike; the folder
made is then a registered part like any other (the registry is read again).
"""
from __future__ import annotations

from pathlib import Path

from as2d_core.setup.paths import models_dir as default_models_dir
from as2d_core.setup.plugins import Part, load_registry


def importers() -> list[Part]:
    """The model parts that convert a checkpoint the user names."""
    registry = load_registry()
    parts = (registry.get("model", name) for name in registry.names("model"))
    return [part for part in parts if "imports" in part.info]


def recognized(path: str | Path) -> Part | None:
    """The importer that reads the checkpoint at ``path``, if any."""
    return next((part for part in importers() if part.info["recognizes"](Path(path))), None)


def import_checkpoint(path: str | Path, name: str | None = None, models_dir: Path | None = None,
                      force: bool = False) -> Path:
    """Convert the checkpoint at ``path`` into ``models_dir/NAME`` (reused when the same checkpoint is already
    there, unchanged); a ValueError naming the layouts the installed plugins read when none reads it."""
    path = Path(path).expanduser()
    part = recognized(path)
    if part is None:
        what = "does not exist" if not path.exists() else "is in no layout an installed plugin imports"
        layouts = "; ".join(p.info["imports"] for p in importers()) or "no installed plugin imports checkpoints"
        raise ValueError(f"{path} {what}; give {layouts}")
    folder = Path(part.factory(Path(models_dir or default_models_dir()), force=force, source=path, name=name))
    load_registry(refresh=True)  # the new folder is a part now
    return folder
