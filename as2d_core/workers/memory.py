"""What the process's C library does with freed memory, where it is glibc.

glibc gives each thread that allocates an arena of its own (up to eight a core), and what one thread freed in
its arena is not reused by another's. as2d runs several threads that allocate side by side (the target's,
the drafter's runtime worker, each request's producer), so each arena kept its own high-water mark: a 330 s
transcription held about 90 MB more at its peak than with one arena, at the same speed (BENCHMARKS.md section
42), so the command and ``WhisperModel`` ask for one (``use_one_malloc_arena``). The runtimes' working memory
comes from their own arenas, so the one lock costs nothing measurable here. A server also gives back what each
request freed (``return_free_memory``). Elsewhere (musl, macOS, Windows) neither does anything.
"""
from __future__ import annotations

import ctypes
import functools
import os

M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
USER_SETTING = "MALLOC_ARENA_MAX"  # glibc reads it at start-up; a user who set it keeps it


@functools.cache
def _glibc():
    """The process's own C library when it is glibc, else None."""
    try:
        return ctypes.CDLL(None) if os.confstr("CS_GNU_LIBC_VERSION") else None
    except (AttributeError, ValueError, OSError, TypeError):  # no confstr or no such name; Windows' CDLL(None)
        return None


def use_one_malloc_arena() -> bool:
    """Ask glibc for one malloc arena from now on; False where the C library is not glibc or the user set
    ``MALLOC_ARENA_MAX``. Threads already attached to an arena keep it; later ones share the first."""
    libc = _glibc()
    if libc is None or USER_SETTING in os.environ:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, 1))


def return_free_memory() -> bool:
    """Give the heap pages freed so far back to the system (glibc's ``malloc_trim``, about 5 ms): a server's
    requests free memory that would otherwise stay mapped (+17% over a 1,000-request soak, BENCHMARKS.md section
    8). False where there is nothing to call."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
