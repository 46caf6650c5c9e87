"""The drafter's threads run nicer than the target's, as ``DecodeOptions.drafter_nice`` and ``guess_nice`` ask.

Niceness is read back from the kernel (``/proc/self/task/TID/stat``), not from our own
bookkeeping; on systems where it is not per thread the tests are skipped.
"""
from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import attrs
import numpy as np
import pytest

from as2d_core.contracts import FeatureCache, Recording
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.workers.priority import lower_thread_priority, run_at_lower_priority, thread_niceness
from tiny_lm import ScriptedJob, ScriptedSource, SlowTarget

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="niceness is per thread on Linux only")


def kernel_niceness(tid: int) -> int:
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])  # field 19 of proc(5), after pid and comm


def tasks() -> set[int]:
    return {int(p.name) for p in Path("/proc/self/task").iterdir()}


def in_thread(work):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("value", work()))
    thread.start()
    thread.join()
    return out["value"]


def test_lowering_one_thread_leaves_the_others():
    base = thread_niceness()

    def work():
        now = lower_thread_priority(5)
        return now, kernel_niceness(threading.get_native_id())

    assert in_thread(work) == (min(19, base + 5),) * 2
    assert thread_niceness() == base == kernel_niceness(threading.get_native_id())


def test_threads_started_at_lower_priority_inherit_it():
    base = thread_niceness()

    def start_a_worker():
        worker = threading.Thread(target=lambda: None)
        seen = {}
        worker.run = lambda: seen.setdefault("nice", kernel_niceness(threading.get_native_id()))
        worker.start()
        worker.join()
        return seen["nice"]

    assert run_at_lower_priority(3, start_a_worker) == min(19, base + 3)
    with pytest.raises(KeyError, match="passed on"):
        run_at_lower_priority(3, lambda: {}["passed on"])


class RecordingJob(ScriptedJob):
    """Notes the niceness of the thread that drafts."""

    seen: list[int] = []
    started = threading.Event()

    def pieces(self):
        RecordingJob.seen.append(kernel_niceness(threading.get_native_id()))
        RecordingJob.started.set()
        yield from super().pieces()


class RecordingSource(ScriptedSource):
    def prepare(self, request, language, threads):
        return RecordingJob(self)


class DraftFirstTarget(SlowTarget):
    """``SlowTarget`` whose preparation waits (at most 30 s) until a drafter has started drafting: on a busy
    machine a niced drafter could otherwise first run after the target had finished, and record nothing."""

    def prepare(self, request, threads):
        RecordingJob.started.wait(30)
        return super().prepare(request, threads)


@pytest.mark.parametrize("start", ["arrival", "prepared"])
@pytest.mark.parametrize("named", [True, False])
def test_producer_drafts_at_the_asked_niceness_and_the_output_is_the_targets(tiny_request, start, named):
    """A named language drafts at ``drafter_nice``; a guess at ``guess_nice``, until the target confirms it."""
    request = tiny_request(5)
    if not named:
        request = attrs.evolve(request, language=None)
    target = SlowTarget(delay=0.001)
    ref = run_request(request, target, None, "target-only").tokens
    RecordingJob.seen = []
    options = DecodeOptions(drafter_nice=4, guess_nice=7, start=start)
    result = run_request(request, target, RecordingSource(ref), "as2d", options)
    assert result.tokens == ref and result.accepted > 0
    guessed = start == "arrival" and not named  # a prepared start drafts the language the target detected
    nice = options.guess_nice if guessed else options.drafter_nice
    assert RecordingJob.seen == [min(19, thread_niceness() + nice)]
    assert thread_niceness() == kernel_niceness(threading.get_native_id())  # the caller's own is untouched


@pytest.mark.parametrize("seconds, windows", [(7.0, 4), (1.5, 1)])
def test_a_file_drafted_ahead_runs_the_drafter_at_the_drafter_niceness_even_on_a_guess(seconds, windows):
    """No language named. Several windows: the drafter drafts the next one ahead at ``drafter_nice``
    (a niced drafter could not get ahead of the target); one window: a guess, at ``guess_nice``."""
    samples = np.random.default_rng(0).normal(0, 0.1, int(seconds * 16_000)).astype(np.float32)
    target = DraftFirstTarget(delay=0.005)
    RecordingJob.seen = []
    RecordingJob.started.clear()
    decode = DecodeOptions(drafter_nice=3, guess_nice=9, route="windows", chunk_length=2)
    pipeline = build_pipeline(target, RecordingSource(list(range(2, 30))),
                        PipelineOptions(language=None, decode=decode), detector=None)
    transcript = pipeline.transcribe(samples, request_id="f", check=True)
    assert len(transcript.windows) == windows and transcript.exact
    nice = decode.drafter_nice if windows > 1 else decode.guess_nice
    assert RecordingJob.seen and set(RecordingJob.seen) == {min(19, thread_niceness() + nice)}


def test_out_of_range_niceness_is_refused():
    with pytest.raises(ValueError, match="drafter_nice must be between 0 and 19"):
        DecodeOptions(drafter_nice=20)


def test_ct2_worker_runs_at_the_drafters_niceness(whisper_ct2_source):
    """CTranslate2 decodes on a worker thread it starts at load: the model a nicer producer gets has a nicer worker."""
    from as2d_whisper.ct2_drafter import Ct2WhisperSource

    before = tasks()
    source = Ct2WhisperSource(whisper_ct2_source.dir, preload_threads=(1,), preload_nice=(4,))
    workers = tasks() - before
    assert workers and {kernel_niceness(t) for t in workers} == {min(19, thread_niceness() + 4)}
    # a producer 4 nicer than this thread finds that model; one at this thread's niceness gets its own
    nicer = run_at_lower_priority(4, lambda: source.model(1))
    assert run_at_lower_priority(4, lambda: source.model(1)) is nicer
    assert in_thread(lambda: source.model(1)) is not nicer
    del nicer
    source.close()  # a server dropping a failed drafter: its models and their workers go
    gc.collect()
    assert tasks() - before == set()


class NicenessSource(ScriptedSource):
    """Drafts one token: the niceness of the thread that drafts it."""

    def __init__(self):
        super().__init__([])

    def prepare(self, request, language, threads):
        self.tokens = [kernel_niceness(threading.get_native_id())]
        self.delays = [0.0]
        return ScriptedJob(self)


def test_a_drafter_process_runs_at_the_drafters_niceness(tiny_request):
    from as2d_core.workers.process_source import ProcessSource

    source = ProcessSource(NicenessSource, niceness=6)
    try:
        job = source.prepare(tiny_request(0), "en", 1)
        drafted = [piece.tokens for piece in job.pieces()]
        job.close()
    finally:
        source.close()
    assert drafted == [(min(19, thread_niceness() + 6),)]


@pytest.mark.parametrize("make", [FeatureCache, lambda: Recording(np.zeros(16, np.float32))],
                         ids=["request features", "a recording's features"])
def test_a_shared_computation_on_a_nicer_thread_holds_no_one_up(make):
    """A drafter's niced thread that starts a shared computation first (the log-mel, at arrival) is not waited on
    by the target's thread, which on a busy host would wait seconds for it: the target computes its own. A caller
    at the same priority waits for the first one's result, and a recording keeps it."""
    cache = make()
    started, release = threading.Event(), threading.Event()

    def first_result():
        started.set()
        release.wait(30)
        return "first"

    def at(nice: int, key: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: (lower_thread_priority(nice), cache.shared(key, first_result)))
        thread.start()
        assert started.wait(30)
        return thread

    nicer = at(5, "mel")
    assert cache.shared("mel", lambda: "own") == "own"  # did not wait for the nicer thread
    release.set()
    nicer.join(30)

    started.clear()
    release.clear()
    same = at(0, "mel, again")
    threading.Timer(0.2, release.set).start()
    assert cache.shared("mel, again", lambda: "own") == "first"  # waited for the first caller at its own priority
    same.join(30)
    kept = isinstance(cache, Recording)
    assert cache.shared("mel, again", lambda: "later") == ("first" if kept else "later")
