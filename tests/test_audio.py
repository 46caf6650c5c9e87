"""Request audio: clear errors for bad input, resampling only when asked."""
import wave

import numpy as np
import pytest

from as2d_core import AudioError, Request, load_audio
from conftest import SHARED_SPEECH



def write_wav(path, samples, rate=16000, channels=1):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.asarray(samples) * 32767).astype(np.int16).tobytes())


def test_reads_real_clip():
    audio = load_audio(SHARED_SPEECH / "clips" / "ljspeech_LJ001-0001.wav")
    assert audio.dtype == np.float32 and audio.ndim == 1 and len(audio) > 16000
    assert 0.01 < np.abs(audio).max() <= 1.0


def test_missing_file():
    with pytest.raises(AudioError, match="not found"):
        load_audio("/nonexistent/clip.wav")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    with pytest.raises(AudioError, match="empty"):
        load_audio(path)


def test_wav_without_samples(tmp_path):
    path = tmp_path / "silent.wav"
    write_wav(path, [])
    with pytest.raises(AudioError, match="no samples"):
        load_audio(path)


def test_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.wav"
    path.write_bytes(b"this is not a wav file at all" * 10)
    with pytest.raises(AudioError, match="cannot read"):
        load_audio(path)


def test_wrong_rate_is_refused_unless_resampling_is_asked(tmp_path):
    # a real clip, decimated to 8 kHz
    speech = load_audio(SHARED_SPEECH / "clips" / "ljspeech_LJ001-0002.wav")
    path = tmp_path / "speech_8k.wav"
    write_wav(path, speech[::2], rate=8000)
    with pytest.raises(AudioError, match="8000 Hz.*--resample"):
        load_audio(path)
    audio = load_audio(path, resample=True)
    assert abs(len(audio) - 2 * len(speech[::2])) <= 1


def test_resampled_tone_keeps_its_pitch(tmp_path):
    path = tmp_path / "tone.wav"
    t = np.arange(8000) / 8000
    write_wav(path, 0.5 * np.sin(2 * np.pi * 440 * t), rate=8000)
    audio = load_audio(path, resample=True)
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * 16000 / len(audio) - 440) < 3


def test_stereo_is_mixed_down(tmp_path):
    path = tmp_path / "stereo.wav"
    write_wav(path, np.zeros(3200), channels=2)
    assert len(load_audio(path)) == 1600


def test_request_refuses_empty_and_wrong_rate():
    with pytest.raises(ValueError, match="empty"):
        Request("r", np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="16000 Hz"):
        Request("r", np.zeros(10, np.float32), sample_rate=8000)


def test_request_audio_is_read_only():
    request = Request("r", np.ones(10, np.float32))
    with pytest.raises(ValueError):
        request.audio[0] = 2.0
