"""One owner for the threads and processes that the core and its plugins start and that outlive a call.

**Threads** that run drafter or runtime code are started here (:func:`start_thread`) or registered before they
start (:func:`track_thread`, for a ``Thread`` subclass such as the producer). A runtime call (a CTranslate2
``generate`` or model load, an ONNX Runtime ``run``) cannot be interrupted, and if the interpreter finalizes
while one runs on a daemon thread, the call's return takes the GIL back, CPython ends the thread with
``pthread_exit``, and the unwinding crosses the runtime's ``noexcept`` frames (pybind11's
``gil_scoped_release``): ``std::terminate``, "terminate called without an active exception", SIGABRT after a
correct answer. So a tracked thread counts as running until an event its own body sets last (not
``Thread.is_alive()``: on CPython before 3.12 a ``join()`` cut short by a signal's exception marks a running
thread as ended, python/cpython#90882), and the process waits for every one before it exits
(:func:`wait_for_threads`, registered with ``atexit``; the command line calls :func:`exit_status`). An
exception that escapes a tracked thread's body is kept (:func:`failures`) and then printed by Python's thread
excepthook as before.

**Processes** (a drafter's child process, a peer's worker) are registered with what ends them
(:func:`own_process`); the owner of the handle releases it when it ends the process itself. At exit, once the
threads are done, each process still owned is ended, the newest first; a failure to end one is logged, never
swallowed.

The pools of threads that serve one call (a file's waves) or one server (its decode executor) are owned by
the function or the application that makes them, and joined when it ends.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref
from collections.abc import Callable

from as2d_core.workers.cleanup import reported

EXIT_WAIT_S = 60.0  # a runtime call ends by itself; this bounds a drafter that truly hangs
# each tracked thread, and the event its body sets last (weak: a thread made but never started is let go)
_ended: weakref.WeakKeyDictionary[threading.Thread, threading.Event] = weakref.WeakKeyDictionary()
_failures: list[str] = []
_lock = threading.Lock()


def track_thread(thread: threading.Thread) -> threading.Thread:
    """Track ``thread`` (not yet started) until its ``run`` returns or raises."""
    ended = threading.Event()
    # the class's run and a weak reference: the thread's own bound method here would tie the thread to itself
    # (a cycle, left to the cycle collector with everything the thread holds)
    run, tracked = type(thread).run, weakref.ref(thread)

    def run_then_mark_ended() -> None:
        this = tracked()  # alive: it is running (a caller may also call ``run`` on its own thread)
        try:
            run(this)
        except BaseException as exc:
            with _lock:
                _failures.append(f"{this.name}: {type(exc).__name__}: {exc}")
            raise  # Python's thread excepthook prints it, as for any thread
        finally:
            with _lock:
                _ended.pop(this, None)
            ended.set()

    thread.run = run_then_mark_ended
    with _lock:
        _ended[thread] = ended
    return thread


def start_thread(target, name: str, *args) -> threading.Thread:
    """A daemon thread running ``target(*args)``, tracked until it ends."""
    thread = track_thread(threading.Thread(target=target, args=args, name=name, daemon=True))
    thread.start()
    return thread


def _tracked() -> list[tuple[threading.Thread, threading.Event]]:
    """The tracked threads whose body has not ended (never the caller's own)."""
    with _lock:
        return [(t, e) for t, e in _ended.items() if t is not threading.current_thread() and not e.is_set()]


def running() -> list[threading.Thread]:
    """The tracked threads still inside their body (a thread made but never started counts only once started)."""
    return [t for t, _ in _tracked() if t.ident is not None]


def wait_for_threads(timeout_s: float = EXIT_WAIT_S) -> list[str]:
    """Wait, at most ``timeout_s`` in all, for every tracked thread's body to end; the names of those still in it."""
    deadline = time.monotonic() + timeout_s
    for thread, ended in _tracked():
        if thread.ident is not None:
            ended.wait(max(0.0, deadline - time.monotonic()))
    return [t.name for t in running()]


def failures() -> list[str]:
    """What escaped tracked threads' bodies so far (``name: Type: message``), oldest first."""
    with _lock:
        return list(_failures)


class OwnedProcess:
    """A process its ``ProcessOwner`` ends at exit unless its holder has ended it and said so (``release``)."""

    def __init__(self, owner: "ProcessOwner", name: str, end: Callable[[], object]):
        self._owner, self.name, self._end = owner, name, end

    def release(self) -> None:
        """The holder has ended the process (or handed it on): the owner no longer ends it at exit."""
        self._owner.release(self)

    def end(self) -> None:
        """End the process now, as the owner does at exit; a failure is logged."""
        self.release()
        reported(self._end, f"ending {self.name}")


class ProcessOwner:
    """The processes still to end, in the order they were owned."""

    def __init__(self) -> None:
        self._owned: list[OwnedProcess] = []
        self._lock = threading.Lock()

    def own(self, name: str, end: Callable[[], object]) -> OwnedProcess:
        """Register a started process with the callable that ends it (kills, or closes and waits for it)."""
        owned = OwnedProcess(self, name, end)
        with self._lock:
            self._owned.append(owned)
        return owned

    def release(self, owned: OwnedProcess) -> None:
        with self._lock:
            if owned in self._owned:
                self._owned.remove(owned)

    def names(self) -> list[str]:
        with self._lock:
            return [owned.name for owned in self._owned]

    def end_all(self) -> None:
        """End every process still owned, the newest first."""
        while True:
            with self._lock:
                if not self._owned:
                    return
                owned = self._owned[-1]
            owned.end()


PROCESSES = ProcessOwner()  # the processes of this interpreter


def own_process(name: str, end: Callable[[], object]) -> OwnedProcess:
    """Register a started process with the callable that ends it; it is ended at exit unless released."""
    return PROCESSES.own(name, end)


def exit_status(status: int, timeout_s: float = EXIT_WAIT_S) -> int:
    """``status``, once every tracked thread has ended or ``timeout_s`` has passed, and the owned processes are
    ended; a thread still inside its call after the wait is named on stderr, so a teardown that fails under it
    is not a mystery."""
    left = wait_for_threads(timeout_s)
    if left:
        print(f"warning: thread(s) {', '.join(left)} still running after {timeout_s:.0f} s: a runtime call that "
              "does not return; the process exits anyway", file=sys.stderr, flush=True)
    PROCESSES.end_all()
    return status


def _at_exit() -> None:
    wait_for_threads()
    PROCESSES.end_all()


atexit.register(_at_exit)
