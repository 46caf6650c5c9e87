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
    # vad_filter on, as faster-whisper's batched pipeline: its VAD's pauses of 0.16 s, the silence left out
    assert info.vad_options.min_silence_duration_ms == 160 and info.duration_after_vad < info.duration
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


def test_the_segments_and_words_are_faster_whispers_batched_pipelines(model, audio):
    """With its VAD (speech joined, cut between spans into 30 s windows), faster-whisper's batched pipeline and
    as2d's give the same segments at the same times, and the same words at the same times: with timestamps and
    an ``initial_prompt`` (every window's, encoded as faster-whisper's batched pipeline encodes it), and with word
    timestamps (aligned over each window's whole seconds, the speech's end carried from window to window)."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check
    from faster_whisper import BatchedInferencePipeline as TheirBatched

    theirs_pipeline = TheirBatched(word_check.faster_whisper_model())
    for options in ({}, {"without_timestamps": False, "initial_prompt": "Printing."}, {"word_timestamps": True}):
        ours, info = BatchedInferencePipeline(model).transcribe(audio, language="en", batch_size=4, **options)
        theirs, their_info = theirs_pipeline.transcribe(audio, language="en", batch_size=4, beam_size=1, **options)
        ours, theirs = list(ours), list(theirs)
        assert [(s.start, s.end, s.text) for s in ours] == [(s.start, s.end, s.text) for s in theirs], options
        assert info.duration_after_vad == pytest.approx(their_info.duration_after_vad), options
        if options.get("word_timestamps"):
            words = [[(w.word, w.start, w.end) for w in s.words] for s in ours]
            assert words == [[(w.word, round(w.start, 2), round(w.end, 2)) for w in s.words] for s in theirs]
        assert info.transcription_options.initial_prompt == options.get("initial_prompt")
        if not options:  # two windows of speech joined: the first ends after 30 s of the audio
            assert len(ours) == 2 and ours[0].end > 30


def test_chunk_length_caps_the_windows_as_faster_whispers_batched_pipeline_caps_its_chunks(model, audio):
    """``chunk_length=8``: the detector's spans and the windows made of them are at most 8 s (each window one
    segment here), as faster-whisper's batched pipeline caps its VAD chunks at its chunk_length."""
    segments, info = BatchedInferencePipeline(model).transcribe(audio, language="en", chunk_length=8)
    segments = list(segments)
    assert info.vad_options.max_speech_duration_s == 8.0
    assert len(segments) > 3 and all(0 < s.end - s.start <= 8.0 for s in segments)
