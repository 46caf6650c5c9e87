"""The drafter's threads yield the CPU to the target's.

On a device with few cores the drafter and the target compete for the same cores. The
target's work is on the user's clock; the drafter's work only helps when it is ahead. So the
drafter runs at a lower scheduling priority (a higher niceness): it drafts on the cycles the
target leaves, and the target's encoder and verification are not slowed by it.

Niceness is per thread on Linux and Android (``setpriority`` on a thread id), and a thread
inherits its creator's, so every thread a drafter starts from its producer thread (a runtime's
worker) runs at the same priority; the next window's lookahead, started from the target's thread,
takes on the niceness of the window drafted before it. Raising niceness needs no
privilege; lowering it again does, so each request's producer is a fresh thread. Elsewhere
(``setpriority`` there applies to the whole process) nothing is changed.
"""
from __future__ import annotations

import os
import threading

from as2d_core.contracts import thread_niceness  # noqa: F401 - here too, beside the rest of the priority helpers
from as2d_core.workers import lifetimes

MAX_NICENESS = 19


def lower_thread_priority(increment: int) -> int | None:
    """Add ``increment`` to the calling thread's niceness (capped at 19); the niceness now, or None where
    niceness is not per thread (or the system refused)."""
    current = thread_niceness()
    if current is None or increment <= 0:
        return current
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(MAX_NICENESS, current + increment))
    except OSError:  # a sandbox that forbids it: the drafter runs at the target's priority
        return current
    return thread_niceness()


def run_at_lower_priority(increment: int, work):
    """``work()`` in a new thread ``increment`` nicer than this one, so the threads it starts (a runtime's
    workers, created when a model loads) keep that priority; its result or exception is passed on."""
    outcome: dict = {}

    def body():
        lower_thread_priority(increment)
        try:
            outcome["value"] = work()
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    # tracked: a stop signal can end the wait below while the thread still loads a runtime's model
    thread = lifetimes.start_thread(body, "as2d-lower-priority")
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
