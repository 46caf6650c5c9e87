"""Threads that run drafter code, tracked so that none is inside a native call when the process exits.

A drafter's runtime call (a CTranslate2 ``generate`` or model load, an ONNX Runtime ``run``) cannot be
interrupted: a drafter that is stopped finishes the call it is in first. If the interpreter finalizes
while such a call runs on a daemon thread, the call's return takes the GIL back, CPython ends the
thread with ``pthread_exit``, and the unwinding crosses the runtime's ``noexcept`` frames (pybind11's
``gil_scoped_release``): ``std::terminate``, "terminate called without an active exception", SIGABRT
after a correct answer. ``tests/test_drafter_threads.py`` shows it for a request that returns while its
drafter is in a call, and for a stop signal during a drafter's model load.

So every thread that runs drafter code is started through :func:`start` (or :func:`track`) and tracked
until its body ends. The engine joins a request's drafter before it returns the result (for at most its
drain timeout, so a stalled drafter cannot hold an answer); whatever is still running then is waited for
at exit (:func:`join_all`, registered with ``atexit``; the command line calls :func:`exit_status`).

A thread counts as running until its own body has returned, an event it sets itself, not
``Thread.is_alive()``: on CPython before 3.12 a ``join()`` interrupted by a signal's exception marks the
thread as stopped while it still runs (python/cpython#90882), which is exactly how a stop signal
during a model load let the process finalize under the load.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref

EXIT_WAIT_S = 60.0  # a runtime call ends by itself; this bounds a drafter that truly hangs
# each tracked thread, and the event its body sets last (weak: a thread made but never started is let go)
_ended: weakref.WeakKeyDictionary[threading.Thread, threading.Event] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def track(thread: threading.Thread) -> threading.Thread:
    """Track ``thread`` (not yet started) until its ``run`` returns or raises."""
    ended = threading.Event()
    run = type(thread).run  # the class's: a bound method here would tie the thread to itself (a cycle to collect)

    def run_then_mark_ended() -> None:
        current = threading.current_thread()
        try:
            run(current)
        finally:
            with _lock:
                _ended.pop(current, None)
            ended.set()

    thread.run = run_then_mark_ended
    with _lock:
        _ended[thread] = ended
    return thread


def start(target, name: str, *args) -> threading.Thread:
    """A daemon thread running ``target(*args)``, tracked until it ends."""
    thread = track(threading.Thread(target=target, args=args, name=name, daemon=True))
    thread.start()
    return thread


def _tracked() -> list[tuple[threading.Thread, threading.Event]]:
    """The tracked threads whose body has not ended (never the caller's own)."""
    with _lock:
        return [(t, e) for t, e in _ended.items() if t is not threading.current_thread() and not e.is_set()]


def running() -> list[threading.Thread]:
    """The tracked threads still inside their body (a thread made but never started counts only once started)."""
    return [t for t, _ in _tracked() if t.ident is not None]


def join_all(timeout_s: float = EXIT_WAIT_S) -> list[str]:
    """Wait, at most ``timeout_s`` in all, for every tracked thread's body to end; the names of those still in it."""
    deadline = time.monotonic() + timeout_s
    for thread, ended in _tracked():
        if thread.ident is not None:
            ended.wait(max(0.0, deadline - time.monotonic()))
    return [t.name for t in running()]


def exit_status(status: int, timeout_s: float = EXIT_WAIT_S) -> int:
    """``status``, once every drafter thread has ended or ``timeout_s`` has passed; a drafter still inside
    its call after that is named on stderr, so a teardown that fails under it is not a mystery."""
    left = join_all(timeout_s)
    if left:
        print(f"warning: drafter thread(s) {', '.join(left)} still running after {timeout_s:.0f} s: a runtime "
              "call that does not return; the process exits anyway", file=sys.stderr, flush=True)
    return status


atexit.register(join_all)
