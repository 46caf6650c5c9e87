"""Clean-ups that must not stop the clean-up around them, yet never fail silently."""
from __future__ import annotations

import logging
from collections.abc import Callable

LOG = logging.getLogger("as2d")


def reported(action: Callable[[], object], what: str) -> None:
    """Run ``action`` (a ``close()``, a ``cancel()``); an exception is logged as a warning with its traceback."""
    try:
        action()
    except Exception:
        LOG.warning("%s failed", what, exc_info=True)
