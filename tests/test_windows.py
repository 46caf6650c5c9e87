"""Cutting long audio into windows at the pauses a detector marks (no models: a detector is given spans)."""
import numpy as np

from as2d_core.input.windows import MAX_WINDOW_S, pack_spans, plan_windows

SR = 16000


class GivenSpans:
    """A detector that reports fixed spans (the real Silero detector is tested in test_long_audio.py)."""

    name = "given"

    def __init__(self, spans):
        self.spans = spans

    def speech_spans(self, audio, max_span_s):
        return self.spans


def test_audio_that_fits_is_one_window_without_a_detector():
    plan = plan_windows(np.zeros(20 * SR, np.float32), GivenSpans([]))
    assert [(w.start, w.end) for w in plan.windows] == [(0, 20 * SR)] and plan.detector is None


def test_spans_are_packed_up_to_the_limit_and_gaps_are_reported():
    spans = [(1 * SR, 10 * SR), (11 * SR, 25 * SR), (26 * SR, 40 * SR), (50 * SR, 55 * SR)]
    plan = plan_windows(np.zeros(60 * SR, np.float32), GivenSpans(spans))
    assert [(w.start_s, w.end_s) for w in plan.windows] == [(1, 25), (26, 55)]
    assert plan.skipped == ((0, 1), (25, 26), (55, 60))
    assert all(w.end - w.start <= MAX_WINDOW_S * SR for w in plan.windows)


def test_a_span_too_long_is_split_evenly():
    plan = plan_windows(np.zeros(70 * SR, np.float32), GivenSpans([(0, 70 * SR)]))
    bounds = [(w.start_s, w.end_s) for w in plan.windows]
    assert np.allclose(bounds, [(0, 70 / 3), (70 / 3, 140 / 3), (140 / 3, 70)], atol=1 / SR)
    assert all(a.end == b.start for a, b in zip(plan.windows, plan.windows[1:]))
    assert plan.skipped == ()


def test_without_a_detector_long_audio_is_cut_at_fixed_times_and_says_so():
    plan = plan_windows(np.zeros(65 * SR, np.float32), None)
    assert [(w.start_s, w.end_s) for w in plan.windows] == [(0, 30), (30, 60), (60, 65)]
    assert "no voice-activity detector" in plan.note


def test_no_speech_at_all_is_all_skipped():
    plan = plan_windows(np.zeros(40 * SR, np.float32), GivenSpans([]))
    assert plan.windows == () and plan.skipped == ((0, 40),)


def test_pack_spans_keeps_order_and_limit():
    assert pack_spans([(0, 5), (6, 9), (10, 30)], 10) == [(0, 9), (10, 30)]
