"""A process exits cleanly after a correct answer, even with its drafter still inside a runtime call.

The crash this guards against: a request returned while its drafter was in a CTranslate2 call
(the target finished first; on a busy machine a niced drafter is slow), the process exited, the
interpreter tore CTranslate2 down under the call, and the process died after printing a correct
answer (SIGABRT, "terminate called without an active exception"). Here the drafter keeps its
runtime busy on purpose until it is stopped, and the engine is told not to wait for it at all
(``drain_timeout_s=0``), so the request returns while a CTranslate2 call runs: before
``workers.lifetimes`` waited for such threads at exit, every such process died with status 134.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from as2d_core.workers import lifetimes

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"

BUSY_DRAFTER = textwrap.dedent(f"""
    import threading
    from as2d_core.contracts import Request
    from as2d_core.input.audio import load_audio
    from as2d_core.decode.request import run_request
    from as2d_core.decode.wrappers import SourceWrapper
    from as2d_core.setup.build import build_part, build_source
    from as2d_core.setup.catalog import resolve_bridge
    from as2d_core.decode.options import DecodeOptions

    class BusyJob:
        '''The real drafter's pieces, then the real runtime kept busy (whole decodes) until cancelled.'''
        def __init__(self, inner):
            self.inner, self.ended_with_eos, self.cancelled = inner, False, threading.Event()
        def pieces(self):
            yield from self.inner.pieces()
            while not self.cancelled.is_set():
                self.inner.decode(self.inner.max_new_tokens)
        def cancel(self):
            self.cancelled.set()
        def close(self):
            self.inner.close()

    class BusySource(SourceWrapper):
        def prepare(self, request, language, threads):
            return BusyJob(self.inner.prepare(request, language, threads))

    target, source = build_part("target", "whisper-base"), build_source("whisper-tiny.en-ct2")
    request = Request("busy", load_audio({str(EXAMPLE)!r}), language="en")
    options = DecodeOptions(drain_timeout_s=0.0)
    reference = run_request(request, target, None, "target-only", options)
    result = run_request(request, target, BusySource(source), "as2d", options, bridge=resolve_bridge(source, target))
    assert result.tokens == reference.tokens
    print("EXACT", "left behind" in (result.note or "") or "runtime call" in (result.note or ""), flush=True)
""")


def test_exit_waits_for_a_drafter_inside_a_runtime_call(whisper_target, whisper_ct2_source, full_run):
    """Processes that return while their drafter is in a CTranslate2 call (one, three in the full run, since the
    failure it guards against came now and then); each exits 0 after the answer."""
    for attempt in range(3 if full_run else 1):
        done = subprocess.run([sys.executable, "-c", BUSY_DRAFTER], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (attempt, done.returncode, done.stderr[-2000:])
        assert done.stdout.startswith("EXACT"), done.stdout


@pytest.fixture
def no_threads_left_by_earlier_tests():
    """These tests count every tracked thread of the process, so the drafters of earlier tests must have ended
    first. A stopped drafter ends after its runtime call; at niceness 19 on busy cores that can take seconds, so
    wait as the process would at exit, and fail (naming them) only if some never end."""
    left = lifetimes.wait_for_threads(lifetimes.EXIT_WAIT_S)
    assert left == [], f"tracked threads of earlier tests still running after {lifetimes.EXIT_WAIT_S:.0f} s: {left}"


@pytest.mark.usefixtures("no_threads_left_by_earlier_tests")
def test_join_all_waits_for_tracked_threads_only():
    release = threading.Event()
    tracked = lifetimes.start_thread(release.wait, "as2d-test-tracked", 30)
    untracked = threading.Thread(target=release.wait, args=(30,), daemon=True)
    untracked.start()
    assert lifetimes.wait_for_threads(0.05) == ["as2d-test-tracked"]
    release.set()
    started = time.monotonic()
    assert lifetimes.wait_for_threads(5) == []
    assert time.monotonic() - started < 5 and not tracked.is_alive()
    untracked.join(5)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
@pytest.mark.usefixtures("no_threads_left_by_earlier_tests")
def test_a_join_cut_short_by_a_signal_still_waits_for_the_thread():
    """A stop signal during ``join()`` (as during a drafter's model load): CPython 3.11 then marks the thread as
    stopped while it runs (python/cpython#90882); the exit must still wait for it, or the interpreter finalizes
    under its runtime call and the process aborts."""

    class Interrupted(BaseException):
        pass

    def interrupt(_signum, _frame):
        raise Interrupted()

    before = signal.signal(signal.SIGALRM, interrupt)
    try:
        thread = lifetimes.start_thread(time.sleep, "as2d-test-loading", 1.0)
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(Interrupted):
            thread.join()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert lifetimes.running() == [thread]
    started = time.monotonic()
    assert lifetimes.wait_for_threads(5) == []
    assert time.monotonic() - started > 0.5  # it waited for the sleep to end


def test_an_error_that_escapes_a_thread_is_kept_and_still_reaches_the_excepthook(monkeypatch):
    heard = []
    monkeypatch.setattr(threading, "excepthook", lambda args: heard.append((args.thread.name, str(args.exc_value))))

    def fail():
        raise RuntimeError("the drafter broke")

    thread = lifetimes.start_thread(fail, "as2d-test-failing")
    thread.join(5)
    assert "as2d-test-failing: RuntimeError: the drafter broke" in lifetimes.failures()
    assert heard == [("as2d-test-failing", "the drafter broke")]  # printed by Python, as for any thread


def test_owned_processes_are_ended_newest_first_unless_released():
    owner, ended = lifetimes.ProcessOwner(), []
    first = owner.own("first", lambda: ended.append("first"))
    owner.own("second", lambda: ended.append("second"))
    released = owner.own("released", lambda: ended.append("released"))
    released.release()  # its holder ended it already
    owner.end_all()
    assert ended == ["second", "first"] and owner.names() == []
    first.end()  # ending one that is no longer owned still ends it, once more
    assert ended == ["second", "first", "first"]


def test_a_process_that_fails_to_end_is_logged_and_the_others_still_end(caplog):
    owner, ended = lifetimes.ProcessOwner(), []

    def broken():
        raise OSError("no such process")

    owner.own("fine", lambda: ended.append("fine"))
    owner.own("broken", broken)
    owner.end_all()
    assert ended == ["fine"]
    assert "ending broken failed" in caplog.text


def test_a_drafter_process_is_owned_until_it_is_closed():
    from as2d_core.workers.process_source import ProcessSource
    from tiny_lm import ScriptedSource

    before = set(lifetimes.PROCESSES.names())
    source = ProcessSource(ScriptedSource, [5, 6, 7])
    (name,) = set(lifetimes.PROCESSES.names()) - before
    assert name.startswith("drafter process ")
    source.close()
    assert name not in lifetimes.PROCESSES.names()
