"""Threads that run drafter code, tracked so that none is inside a native call when the process exits.

A drafter's runtime call (a CTranslate2 ``generate``, an ONNX Runtime ``run``) cannot be
interrupted: a drafter that is stopped finishes the call it is in first. When a request ends
while such a call runs (the target was done first, or the drafter is niced on a busy machine),
and the process then exits, the interpreter tears the runtime down under the running call and
the process dies after a correct answer: SIGABRT with "terminate called without an active
exception", or SIGSEGV. ``tests/test_drafter_threads.py`` shows it.

So every thread that runs drafter code is started through :func:`start` and tracked until it
ends. The engine joins a request's drafter before it returns the result (for at most its drain
timeout, so a stalled drafter cannot hold an answer); whatever is still running then is joined
at exit (:func:`join_all`, registered with ``atexit``), and the command line, which knows its
exit status, leaves with ``os._exit`` if a drafter outlives even that wait (:func:`exit_status`).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref

EXIT_WAIT_S = 60.0  # a runtime call ends by itself; this bounds a drafter that truly hangs
_running: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_lock = threading.Lock()


def track(thread: threading.Thread) -> threading.Thread:
    """Keep ``thread`` (started or about to start) in the set joined at exit."""
    with _lock:
        _running.add(thread)
    return thread


def start(target, name: str, *args) -> threading.Thread:
    """A daemon thread running ``target(*args)``, tracked until it ends."""
    thread = track(threading.Thread(target=target, args=args, name=name, daemon=True))
    thread.start()
    return thread


def running() -> list[threading.Thread]:
    """The tracked threads still alive (never the caller's own)."""
    with _lock:
        threads = list(_running)
    return [t for t in threads if t.is_alive() and t is not threading.current_thread()]


def join_all(timeout_s: float = EXIT_WAIT_S) -> list[str]:
    """Wait, at most ``timeout_s`` in all, for every tracked thread; the names of those still running."""
    deadline = time.monotonic() + timeout_s
    for thread in running():
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in running()]


def exit_status(status: int, timeout_s: float = EXIT_WAIT_S) -> int:
    """``status``, once every drafter thread has ended; if one is still inside the runtime after
    ``timeout_s``, the process leaves at once with ``os._exit(status)``, so that nothing is torn
    down under it (the output is flushed first)."""
    left = join_all(timeout_s)
    if left:
        print(f"warning: drafter thread(s) {', '.join(left)} still running after {timeout_s:.0f} s; "
              "leaving without tearing the runtime down", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
    return status


atexit.register(join_all)
