"""SIGINT and SIGTERM stop a command by unwinding it, so every request on the way out stops and joins its drafter.

The stop is an exception (``Stopped``, not one that ``except Exception`` swallows) raised where the main
thread is. A native library may drop an exception raised while its code runs: PyAV's decoder dropped about 1
stop in 5 that landed while it decoded, and the command then ran to its end. So until the command has unwound
(``stop_over``), the stop is raised again every ``STOP_AGAIN_S`` wherever it is not already being unwound.
A second signal ends the process at once, by the system's default.
"""
from __future__ import annotations

import signal
import sys

STOP_AGAIN_S = 0.5
received: list[int] = []  # the stop signal received, if any: whatever unwinds after it is its consequence


class Stopped(BaseException):
    """SIGINT or SIGTERM, unwinding the command."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_stop_signals(handler) -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, handler)


def catch_stops() -> None:
    """From now on SIGINT and SIGTERM raise ``Stopped`` in the main thread."""
    _on_stop_signals(_stop)


def release_stops() -> None:
    """SIGINT and SIGTERM end the process at once again (while the drafters are joined on the way out)."""
    _on_stop_signals(signal.SIG_DFL)


def _stop(signum, _frame) -> None:
    received.append(signum)
    release_stops()
    signal.signal(signal.SIGALRM, _stop_again)
    signal.setitimer(signal.ITIMER_REAL, STOP_AGAIN_S, STOP_AGAIN_S)
    raise Stopped(signum)


def _unwinding_a_stop() -> bool:
    """Whether the interrupted code is handling a ``Stopped`` (an ``except``, a ``finally``, an ``__exit__``)."""
    exc = sys.exc_info()[1]
    while exc is not None:
        if isinstance(exc, Stopped):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _stop_again(_signum, _frame) -> None:
    """The stop raised again where a library dropped it; cleanup that is already unwinding it is left alone."""
    if not _unwinding_a_stop():
        raise Stopped(received[0])


def stop_over() -> None:
    """The command has unwound: no stop is raised again."""
    signal.setitimer(signal.ITIMER_REAL, 0)
