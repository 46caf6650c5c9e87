"""Drafting ahead leaves nothing for the cycle collector.

A server transcribes request after request; whatever one request leaves in a
reference cycle (a drafter's job, its thread, a failed drafter's models) stays
until Python's cycle collector happens to run, which in a 1,000-request soak
was hundreds of megabytes and several native worker threads. These tests run
whole files with the collector off and count what it would have to free.
"""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from as2d_core.contracts import Request
from as2d_core.decode.lookahead import LookaheadSource
from as2d_core.decode.options import DecodeOptions
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from tiny_lm import ScriptedSource, SlowTarget


@pytest.fixture
def collector_off():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _file(seconds: float = 7.0) -> np.ndarray:
    return np.random.default_rng(0).normal(0, 0.1, int(seconds * 16_000)).astype(np.float32)


def _unreachable_after(run) -> list[str]:
    """The kinds of object that a second ``run`` leaves only the cycle collector can free."""
    run()  # the first run may build things once (classes, caches), cycles and all
    gc.collect()
    before = threading.active_count()
    run()
    for thread in threading.enumerate():  # drafting threads end with their drafts
        if thread.name.startswith("as2d-") and thread is not threading.current_thread():
            thread.join(5)
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        kinds = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert threading.active_count() <= before
    return kinds


@pytest.mark.parametrize("crash_after", [None, 2])
def test_a_file_drafted_ahead_leaves_no_cycles(collector_off, crash_after):
    target = SlowTarget(0.01)  # slow enough that the crash is seen before the target is done
    source = ScriptedSource(list(range(2, 30)), crash_after=crash_after)

    def run():  # a pipeline per request over resident models, as the server does
        options = PipelineOptions(language="en", decode=DecodeOptions(route="windows", chunk_length=2))
        pipeline = build_pipeline(target, source, options, detector=None)
        transcript = pipeline.transcribe(_file(), request_id="f")
        assert len(transcript.windows) == 4
        assert any(w.result.producer_error for w in transcript.windows) == (crash_after is not None)

    assert _unreachable_after(run) == []


def test_a_job_prepared_but_never_drafted_is_released(collector_off):
    source = ScriptedSource([2, 3, 4])
    request = Request(request_id="r", audio=_file(1.0), language="en")

    def run():
        ahead = LookaheadSource(source)
        job = ahead.prepare(request, "en", 1)
        job.close()  # the engine ran target-only: nothing ever asked for the pieces
        ahead.cancel()

    assert _unreachable_after(run) == []
