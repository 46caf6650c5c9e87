"""When the drafter works ahead on a file's next window: only once that window is queued, at once if the
current window's draft has ended (the pipeline queues it at the current window's first commit)."""
from __future__ import annotations

import time

import numpy as np

from as2d_core.contracts import Request
from as2d_core.decode.lookahead import LookaheadSource
from tiny_lm import ScriptedSource


def _request(name: str) -> Request:
    return Request(request_id=name, audio=np.zeros(16_000, dtype=np.float32), language="en")


def test_the_next_window_is_drafted_once_queued_and_at_once_after_the_current_draft_ended():
    ahead = LookaheadSource(ScriptedSource([2, 3, 4]))
    first, second = _request("w0"), _request("w1")
    job = ahead.prepare(first, "en", 1)
    assert [t for piece in job.pieces() for t in piece.tokens] == [2, 3, 4]
    deadline = time.monotonic() + 5
    while not job.done and time.monotonic() < deadline:  # the drafting thread marks its end
        time.sleep(0.01)
    assert job.done and ahead._ahead is None  # nothing queued: nothing drafted ahead
    ahead.queue_next(second, 1)
    assert ahead._ahead is not None and ahead._ahead.request_id == "w1"  # started without waiting for a prepare
    assert [t for piece in ahead.prepare(second, "en", 1).pieces() for t in piece.tokens] == [2, 3, 4]
    ahead.cancel()


def test_a_window_queued_while_the_current_draft_runs_waits_for_its_end():
    ahead = LookaheadSource(ScriptedSource([2, 3, 4], delays=[0.2, 0.2, 0.2]))
    job = ahead.prepare(_request("w0"), "en", 1)
    pieces = job.pieces()
    next(pieces)  # drafting has started and goes on
    ahead.queue_next(_request("w1"), 1)
    assert ahead._ahead is None
    list(pieces)
    deadline = time.monotonic() + 5
    while ahead._ahead is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ahead._ahead is not None and ahead._ahead.request_id == "w1"
    ahead.cancel()
