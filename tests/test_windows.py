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
    plan = plan_windows(np.zeros(20 * SR, np.float32), None)
    assert [(w.start, w.end) for w in plan.windows] == [(0, 20 * SR)] and plan.detector is None
    assert plan.speech is None and plan.note is None


def test_speech_is_joined_and_cut_between_spans_up_to_the_limit_and_the_rest_reported():
    """faster-whisper's batched pipeline: spans of 9, 14, 14 and 5 s joined; a window takes spans while it stays
    within 30 s, so the cut falls between the second and the third; times map back to the file's."""
    spans = [(1 * SR, 10 * SR), (11 * SR, 25 * SR), (26 * SR, 40 * SR), (50 * SR, 55 * SR)]
    audio = np.arange(60 * SR, dtype=np.float32)
    plan = plan_windows(audio, GivenSpans(spans))
    assert [(w.start_s, w.end_s) for w in plan.windows] == [(0, 23), (23, 42)] and plan.detector == "given"
    assert plan.skipped == ((0, 1), (10, 11), (25, 26), (40, 50), (55, 60))
    joined = plan.audio(audio)
    assert joined.size == 42 * SR and joined[9 * SR] == 11 * SR  # the second span follows the first
    speech = plan.speech
    assert (speech.original_s(23.0), speech.original_s(23.0, is_end=True), speech.original_s(41.5)) == (26, 25, 54.5)
    assert speech.original_s(8.9996, is_end=True) == 10.0  # rounded to 1 ms first: the first span's end


def test_short_audio_with_a_detector_is_its_speech_too():
    plan = plan_windows(np.zeros(20 * SR, np.float32), GivenSpans([(2 * SR, 5 * SR)]))
    assert [(w.start_s, w.end_s) for w in plan.windows] == [(0, 3)] and plan.skipped == ((0, 2), (5, 20))


def test_without_a_detector_long_audio_is_cut_at_fixed_times_and_says_so():
    plan = plan_windows(np.zeros(65 * SR, np.float32), None)
    assert [(w.start_s, w.end_s) for w in plan.windows] == [(0, 30), (30, 60), (60, 65)]
    assert "no voice-activity detector" in plan.note


def test_no_speech_at_all_is_all_skipped():
    plan = plan_windows(np.zeros(40 * SR, np.float32), GivenSpans([]))
    assert plan.windows == () and plan.skipped == ((0, 40),)


def test_pack_spans_keeps_order_and_limit():
    assert pack_spans([(0, 5), (6, 9), (10, 30)], 10) == [(0, 9), (10, 30)]
