"""``from as2d import BatchedInferencePipeline``: faster-whisper's batched interface over as2d's batched route.

The real whisper-base decodes a file of two windows side by side (its windows graph, one verification call
for both) and gives the segments the same model gives one window at a time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from as2d import BatchedInferencePipeline, WhisperModel

BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"


@pytest.fixture(scope="module")
def model():
    return WhisperModel("base", device="cpu", source=None)


@pytest.fixture(scope="module")
def audio():
    speech, rate = soundfile.read(BUNDLED, dtype="float32")
    assert rate == 16_000
    return np.concatenate([speech[: 12 * rate], np.zeros(rate, np.float32)] * 3)  # 39 s: two windows at pauses


def test_batched_segments_are_those_of_one_window_at_a_time(model, audio, monkeypatch):
    groups = []
    window_group = model.target.window_group
    monkeypatch.setattr(model.target, "window_group", lambda size, threads: groups.append(size) or
                        window_group(size, threads))  # a spy on the real group: the route taken
    batched = BatchedInferencePipeline(model=model)
    segments, info = batched.transcribe(audio, batch_size=8, language="en")
    segments = list(segments)
    assert groups == [2]  # both windows in one wave
    assert info.route == {"route": "windows", "wave_size": 2, "drafts": False, "why": "batch_windows 8"}
    _lazy, auto = batched.transcribe(audio, language="en")  # as2d's default, batch_size="auto"; nothing decoded
    assert auto.route == {"route": "windows", "wave_size": 2, "drafts": False, "why": "default rule"}
    profile = BUNDLED.parents[1] / "tests" / "fixtures" / "profile-no-drafting.json"
    _lazy, priced = BatchedInferencePipeline(model, profile=str(profile)).transcribe(audio, language="en")
    assert priced.route["why"] == f"profile {profile}" and priced.route["wave_size"] == 2
    assert info.duration == pytest.approx(39.0) and info.language == "en"
    assert info.transcription_options.condition_on_previous_text is False  # as faster-whisper's batched pipeline
    assert info.transcription_options.without_timestamps is True and info.transcription_options.temperatures == [0.0]
    assert info.vad_options is not None and segments[0].end < 29  # vad_filter on, as faster-whisper's batched: cut at
    # a pause (every 30 s without it)
    alone, _ = batched.transcribe(audio, batch_size=1, language="en")  # the windows route, one window at a time
    alone = list(alone)
    assert [(s.id, s.seek, s.start, s.end, s.text, s.tokens) for s in segments] == [
        (s.id, s.seek, s.start, s.end, s.text, s.tokens) for s in alone]
    assert len(segments) == 2 and segments[0].end <= segments[1].start and "printing" in segments[0].text.lower()


def test_batched_refuses_what_it_cannot_do(model, audio):
    batched = BatchedInferencePipeline(model)
    for size in (0, 17, 2.5, "many"):
        with pytest.raises(ValueError, match="batch_size must be a whole number from 1 to 16"):
            batched.transcribe(audio, batch_size=size)
    with pytest.raises(ValueError, match="temperature"):
        batched.transcribe(audio, temperature=-0.4)
    with pytest.raises(ValueError, match="not an as2d device profile"):
        BatchedInferencePipeline(model, profile=str(BUNDLED))
    with pytest.raises(TypeError, match="as2d WhisperModel"):
        BatchedInferencePipeline(object())


def test_clips_are_the_windows_as_faster_whispers_batched_pipeline_takes_them(model, audio):
    """``clip_timestamps`` as the batched pipeline's list of ``{"start", "end"}`` (seconds): each clip one window,
    no voice-activity detector, its segment at the clip's times; faster-whisper's batched pipeline gives the
    same segments."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check
    from faster_whisper import BatchedInferencePipeline as TheirBatched

    clips = [{"start": 1.0, "end": 9.5}, {"start": 12.0, "end": 25.0}, {"start": 26.5, "end": 38.5}]
    segments, info = BatchedInferencePipeline(model).transcribe(audio, language="en", clip_timestamps=clips)
    ours = [(s.start, s.end, s.text) for s in segments]
    theirs, _ = TheirBatched(word_check.faster_whisper_model()).transcribe(audio, language="en", beam_size=1,
                                                                           clip_timestamps=clips)
    assert ours == [(s.start, s.end, s.text) for s in theirs]
    assert [start for start, _end, _text in ours] == [1.0, 12.0, 26.5] and info.vad_options is None


def test_chunk_length_caps_the_windows_as_faster_whispers_batched_pipeline_caps_its_chunks(model, audio):
    """``chunk_length=8``: the detector's spans and the windows made of them are at most 8 s (each window one
    segment here), as faster-whisper's batched pipeline caps its VAD chunks at its chunk_length."""
    segments, info = BatchedInferencePipeline(model).transcribe(audio, language="en", chunk_length=8)
    segments = list(segments)
    assert info.vad_options.max_speech_duration_s == 8.0
    assert len(segments) > 3 and all(0 < s.end - s.start <= 8.0 for s in segments)
