"""faster-whisper's ``faster_whisper.utils``: the model names, the model's folder and the timestamp format."""
from __future__ import annotations

import logging

from .models import available_models, download_model
from .objects import format_timestamp

__all__ = ["available_models", "download_model", "format_timestamp", "get_logger"]


def get_logger() -> logging.Logger:
    """The package's logger (faster-whisper's is named after its package too)."""
    return logging.getLogger("as2d")
