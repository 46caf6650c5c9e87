"""One malloc arena for the whole process.

glibc gives each thread that allocates an arena of its own (up to eight a core), and what one thread freed in
its arena is not reused by another's. as2d runs several threads that allocate side by side (the target's,
the drafter's runtime worker, each request's producer), so each arena kept its own high-water mark: a 330 s
transcription held about 90 MB more at its peak than with one arena, at the same speed (BENCHMARKS.md section
42). The runtimes' working memory comes from their own arenas, so the one lock costs nothing measurable here.
"""
from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
USER_SETTING = "MALLOC_ARENA_MAX"  # glibc reads it at start-up; a user who set it keeps it


def use_one_malloc_arena() -> bool:
    """Ask glibc for one malloc arena from now on; False where the C library is not glibc or the user set
    ``MALLOC_ARENA_MAX``. Threads already attached to an arena keep it; later ones share the first."""
    if USER_SETTING in os.environ:
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):  # no such name here: not glibc
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return bool(mallopt is not None and mallopt(M_ARENA_MAX, 1))
