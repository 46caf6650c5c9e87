"""faster-whisper's Python interface on as2d (``from as2d import WhisperModel``), with the real whisper-base.

The snippets are faster-whisper's README (1.2.1) as documented, with only the import changed and the
model size its CPU line names set to "base"; options as2d does not have are refused, never ignored.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from audio_files import encode
from conftest import speech_audio

from as2d_core.decode.wrappers import TargetWrapper


@pytest.fixture(scope="module")
def model():
    from as2d import WhisperModel

    return WhisperModel("base", device="cpu", compute_type="int8")


@pytest.fixture
def audio_mp3(tmp_path, monkeypatch):
    """The README's ``audio.mp3`` in the working folder: a real 16 s recording with pauses."""
    encode(tmp_path / "audio.mp3", speech_audio("librivox_sense_en_w00"), "mp3")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "audio.mp3"


def test_faster_whispers_readme_runs_with_only_the_import_changed(audio_mp3, capsys):
    from as2d import WhisperModel  # README: from faster_whisper import WhisperModel

    model_size = "base"  # README: "large-v3", on a GPU

    # or run on CPU with INT8
    model = WhisperModel(model_size, device="cpu", compute_type="int8")

    # Word-level timestamps
    segments, _ = model.transcribe("audio.mp3", word_timestamps=True)

    for segment in segments:
        for word in segment.words:
            print("[%.2fs -> %.2fs] %s" % (word.start, word.end, word.word))

    # VAD filter
    segments, _ = model.transcribe("audio.mp3", vad_filter=True)
    segments, _ = model.transcribe(
        "audio.mp3",
        vad_filter=True,
        vad_parameters=dict(min_silence_duration_ms=500),
    )

    # "segments is a generator so the transcription only starts when you iterate over it"
    segments, _ = model.transcribe("audio.mp3")
    segments = list(segments)  # The transcription will actually run here.

    printed = capsys.readouterr().out.splitlines()
    assert len(printed) > 20 and all(line.startswith("[") and "s -> " in line for line in printed)
    text = "".join(s.text for s in segments)
    assert "Dashwood" in text and [s.id for s in segments] == list(range(1, len(segments) + 1))
    assert "".join(line.split("] ", 1)[1] for line in printed).split() == text.split()


def test_the_readmes_first_snippet_is_refused_with_the_reason(model, audio_mp3):
    """The README's first example asks for beam search (beam_size=5): as2d decodes greedily, and says so."""
    with pytest.raises(ValueError, match=r"beam_size=5 is not supported: as2d decodes greedily"):
        model.transcribe("audio.mp3", beam_size=5)
    from as2d import WhisperModel

    with pytest.raises(ValueError, match=r"device 'cuda' is not available.*as2d models install whisper-base"):
        WhisperModel("large-v3", device="cuda", compute_type="float16")
    with pytest.raises(ValueError, match=r"no target for the Whisper model 'large-v3'.*installed here: .*whisper-base"):
        WhisperModel("large-v3", device="cpu", compute_type="int8")


@pytest.mark.parametrize("options, message", [
    ({"temperature": 0.4}, "temperature=0.4 is not supported: as2d decodes greedily"),
    ({"temperature": [0.0, 0.5]}, "without fallback"),
    ({"patience": 2}, "patience=2 is not supported: it is a beam-search option"),
    ({"repetition_penalty": 1.1}, "repetition_penalty=1.1"),
    ({"no_speech_threshold": 0.4}, "drops no window as silent"),
    ({"initial_prompt": [50363, 1012]}, "give the prompt as text"),
    ({"prefix": "And"}, "does not force a decoding prefix"),
    ({"clip_timestamps": "0,5"}, "clip_timestamps"),
    ({"vad_parameters": {"min_speech_duration_ms": 250}}, "min_speech_duration_ms"),
    ({"vad_filter": False, "vad_parameters": {"threshold": 0.6}}, "vad_parameters need vad_filter=True"),
    ({"task": "summarize"}, "unknown task 'summarize'"),
])
def test_options_as2d_does_not_have_are_refused(model, options, message):
    with pytest.raises(ValueError, match=message):
        model.transcribe(np.zeros(16_000, np.float32), **options)


def test_segments_are_the_targets_greedy_output_and_info_says_how(model):
    audio = speech_audio("librivox_sense_en_w00")
    segments, info = model.transcribe(audio, word_timestamps=True)
    segments = list(segments)
    assert info.language == "en" and 0.5 < info.language_probability <= 1.0
    probabilities = [p for _, p in info.all_language_probs]
    assert probabilities == sorted(probabilities, reverse=True) and math.isclose(sum(probabilities), 1.0)
    assert info.duration == pytest.approx(audio.size / 16_000) and info.duration_after_vad == info.duration
    assert info.temperature_fallback is False and info.transcription_options.temperatures == [0.0]
    assert info.transcription_options.beam_size == 1
    assert len(segments) > 1 and all(math.isnan(s.avg_logprob) and s.temperature == 0.0 for s in segments)
    for segment in segments:  # each segment's words spell it, inside it
        assert "".join(w.word for w in segment.words).strip() == segment.text.strip()
        assert all(segment.start <= w.start <= w.end <= segment.end for w in segment.words)
    source, model.source = model.source, None  # the same model, target-only
    try:
        reference, _ = model.transcribe(audio, language="en", word_timestamps=True)
        reference = list(reference)
    finally:
        model.source = source
    assert [s.tokens for s in segments] == [s.tokens for s in reference]
    assert [s.words for s in segments] == [s.words for s in reference]


def test_segments_come_window_by_window_as_the_caller_iterates(model):
    """Over 30 s (two windows at the pause): nothing is decoded before the first segment is asked for,
    and the second window waits until the caller has taken the first window's segments."""
    audio = np.concatenate([speech_audio("ljspeech_en_w00"), speech_audio("librivox_sense_en_w01")])
    prepared = []
    target = model.target

    class Counting(TargetWrapper):
        def prepare(self, request, threads):
            prepared.append(request.request_id)
            return target.prepare(request, threads)

    model.target = Counting(target)
    try:
        segments, info = model.transcribe(audio, language="en")
        assert prepared == [] and info.duration_after_vad > 30
        first = next(segments)
        assert first.start < 26 and len(prepared) == 1
        segments.close()  # the rest is never decoded
        assert len(prepared) == 1
    finally:
        model.target = target


def test_an_as2d_model_folder_works_and_other_folders_say_why_not(tmp_path):
    from as2d import WhisperModel
    from as2d_core.setup.paths import models_dir

    assert WhisperModel(str(models_dir() / "whisper-base-int8"), source=None).target.name == "whisper-base-int8"
    faster_whispers = tmp_path / "whisper-base-ct2"
    faster_whispers.mkdir()
    (faster_whispers / "model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="is a CTranslate2 folder .faster-whisper's format., not an as2d model folder"):
        WhisperModel(str(faster_whispers))
    with pytest.raises(ValueError, match="holds 'whisper-tiny.en-ct2', which is not one of as2d's Whisper targets"):
        WhisperModel(str(models_dir() / "whisper-tiny.en-ct2"))
    with pytest.raises(ValueError, match="compute_type 'int8' asks for whisper-base-int8"):
        WhisperModel(str(models_dir() / "whisper-base"), compute_type="int8")
