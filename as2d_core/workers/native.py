"""Native libraries' chatter kept off standard output.

Some runtimes print from C code straight to file descriptor 1 (MNN prints a
CPU-feature banner when imported and a line per high-precision runtime), which
would corrupt commands that promise JSON on standard output. Plugins wrap such
imports and calls in ``native_stdout_to_stderr``.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import sys
import threading
from collections.abc import Iterator

_lock = threading.RLock()  # fd 1 is process-wide: one redirection at a time


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """Send what is printed to stdout during the block to stderr (C and Python buffers flushed on both sides)."""
    libc = ctypes.CDLL(None)
    with _lock:
        sys.stdout.flush()
        libc.fflush(None)
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            yield
        finally:
            sys.stdout.flush()
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)


def import_quietly(*modules: str):
    """Import ``modules`` (raising ImportError as usual) with their import-time output on stderr; the first is returned."""
    if all(sys.modules.get(name) is not None for name in modules):  # None there means "blocked": import raises
        return sys.modules[modules[0]]
    with native_stdout_to_stderr():
        loaded = [importlib.import_module(name) for name in modules]
    return loaded[0]
