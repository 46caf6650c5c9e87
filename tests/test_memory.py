"""glibc's memory in as2d's processes (``as2d_core.workers.memory``): one malloc arena, counted by glibc's
own report, and freed memory given back.

Each case runs in a fresh interpreter: arenas, once made, stay for the life of a process. Four threads each
allocate and hold blocks side by side; ``malloc_info`` then lists one ``<heap>`` per arena in use.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

GLIBC = hasattr(os, "confstr") and "CS_GNU_LIBC_VERSION" in os.confstr_names and bool(
    os.confstr("CS_GNU_LIBC_VERSION"))
pytestmark = pytest.mark.skipif(not GLIBC, reason="malloc arenas are glibc's: this C library is not glibc")

ARENAS = textwrap.dedent("""
    import ctypes, sys, tempfile, threading
    from as2d_core.workers.memory import use_one_malloc_arena
    print(use_one_malloc_arena())
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    held, ready = [], threading.Barrier(5)
    def allocate():
        held.extend(libc.malloc(64 * 1024) for _ in range(8))  # each thread's first malloc picks its arena
        ready.wait()
        ready.wait()
    threads = [threading.Thread(target=allocate) for _ in range(4)]
    for t in threads:
        t.start()
    ready.wait()  # every thread holds its blocks now
    with tempfile.NamedTemporaryFile(suffix=".xml") as report:
        stream = libc.fopen(report.name.encode(), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        print(open(report.name).read().count("<heap nr="))
    ready.wait()
    for t in threads:
        t.join()
""")


def _arenas(env: dict[str, str], one: bool = True) -> tuple[str, int]:
    code = ARENAS if one else ARENAS.replace("print(use_one_malloc_arena())", "print('no')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env)
    assert run.returncode == 0, run.stderr
    asked, heaps = run.stdout.split()
    return asked, int(heaps)


def test_threads_allocating_side_by_side_share_one_arena():
    assert _arenas({}) == ("True", 1)


def test_without_the_call_each_thread_gets_an_arena_of_its_own():
    # the control: glibc's default, which the call changes (a thread allocating first makes a new arena)
    asked, heaps = _arenas({}, one=False)
    assert heaps >= 4


def test_a_users_malloc_arena_max_is_kept():
    assert _arenas({"MALLOC_ARENA_MAX": "3"}) == ("False", 3)


def test_the_command_line_asks_for_it_first():
    code = ("import sys; from as2d_core.cli import main as m; "
            "m.use_one_malloc_arena = lambda: print('asked') or True; sys.argv = ['as2d', '--help']; m.main()")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("asked\n")


def test_the_python_interface_asks_for_it_before_the_models_load(monkeypatch):
    import as2d.transcribe

    asked = []
    monkeypatch.setattr(as2d.transcribe, "use_one_malloc_arena", lambda: asked.append(1) or True)
    monkeypatch.setattr(as2d.transcribe, "build_together", lambda *parts: asked.append(2) or (None, None))
    as2d.transcribe.WhisperModel("base", compute_type="int8", source=None)
    assert asked == [1, 2]


def test_freed_memory_is_given_back():
    """The server trims the heap after each request (BENCHMARKS.md section 8: without it, +17% over a soak)."""
    from as2d_core.workers.memory import return_free_memory

    assert return_free_memory() is True
