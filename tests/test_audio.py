"""Request audio: every common format decoded by PyAV, converted to 16 kHz mono, clear errors for the rest."""
import warnings
import wave
from pathlib import Path

import numpy as np
import pytest

from as2d_core.input.audio import AudioError, load_audio, mono_samples
from as2d_core.contracts import Request
from as2d_core.input.audio import TruncatedAudioWarning, read_audio
from audio_files import FORMATS, encode


BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"


@pytest.fixture(scope="module")
def speech():
    return load_audio(BUNDLED)


def test_reads_bundled_clip(speech):
    decoded = read_audio(BUNDLED)
    assert speech.dtype == np.float32 and speech.ndim == 1 and len(speech) > 16000
    assert 0.01 < np.abs(speech).max() <= 1.0
    assert decoded.info.codec == "pcm_s16le" and decoded.info.conversions == [] and decoded.info.warnings == ()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_format_decodes_to_the_same_speech(tmp_path, speech, name):
    decoded = read_audio(encode(tmp_path / f"clip.{name}", speech, name))
    _, _, rate, layout = FORMATS[name]
    assert decoded.info.sample_rate == rate and decoded.info.channels == (2 if layout == "stereo" else 1)
    assert ("resampled" in " ".join(decoded.info.conversions)) == (rate != 16000)
    assert abs(decoded.samples.size - speech.size) < 0.05 * 16000  # codecs pad or trim a few ms
    n = min(decoded.samples.size, speech.size)
    lag = int(np.argmax(np.correlate(decoded.samples[:32000], speech[:32000], "full"))) - 31999
    a, b = (decoded.samples[lag:n], speech[: n - lag]) if lag >= 0 else (decoded.samples[: n + lag], speech[-lag:n])
    assert np.corrcoef(a, b)[0, 1] > 0.9, "the decoded audio is not the encoded speech"


def test_resampled_tone_keeps_its_pitch(tmp_path):
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
    audio = load_audio(encode(tmp_path / "tone.mp3", tone, "mp3"))  # 44.1 kHz stereo
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * 16000 / len(audio) - 440) < 3


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(AudioError, match="not found"):
        load_audio("/nonexistent/clip.wav")
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    with pytest.raises(AudioError, match="empty"):
        load_audio(path)


def test_wav_without_samples(tmp_path):
    path = tmp_path / "silent.wav"
    with wave.open(str(path), "wb") as header_only:
        header_only.setnchannels(1)
        header_only.setsampwidth(2)
        header_only.setframerate(16000)
    with pytest.raises(AudioError, match="no samples"):
        load_audio(path)


def test_not_audio(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_bytes(bytes(range(256)) * 40)
    with pytest.raises(AudioError, match="cannot read|no audio stream"):
        load_audio(path)


def test_file_without_an_audio_stream(tmp_path):
    path = tmp_path / "captions.srt"
    path.write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    with pytest.raises(AudioError, match="no audio stream"):
        load_audio(path)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_samples_are_refused(tmp_path, bad):
    samples = np.zeros(16000, np.float32)
    samples[8000] = bad
    with pytest.raises(AudioError, match="NaN or infinite samples.*0.500 s"):
        load_audio(encode(tmp_path / "bad.f32.wav", samples, "f32.wav"))


def test_samples_in_memory_are_taken_as_float_mono_or_refused(speech):
    """An int16 array read as floats transcribes noise and a stereo one flattened interleaves its channels, so
    both are refused with what to do; float64 and a single column are the same samples."""
    assert mono_samples(speech.astype(np.float64)).dtype == np.float32
    assert np.array_equal(mono_samples(speech[:, None]), speech) and np.array_equal(mono_samples(speech[None]), speech)
    with pytest.raises(AudioError, match=r"int16 integers.*\(samples / 32768\)"):
        mono_samples((speech * 32767).astype(np.int16))
    with pytest.raises(AudioError, match=r"uint8 integers.*scale them first$"):
        mono_samples(np.zeros(10, np.uint8))
    with pytest.raises(AudioError, match=r"shape \(\d+, 2\), several channels.*mean\(axis=1\)"):
        mono_samples(np.stack([speech, speech], axis=1))
    with pytest.raises(AudioError, match="not bool"):
        mono_samples(speech > 0)
    bad = speech.copy()
    bad[16_000] = np.nan
    with pytest.raises(AudioError, match=r"1 NaN or infinite values \(the first at 1.000 s\)"):
        mono_samples(bad)


@pytest.mark.parametrize("name", ["s16.wav", "flac"])
def test_truncated_file_is_read_as_far_as_it_goes_with_a_warning(tmp_path, speech, name):
    whole = encode(tmp_path / f"whole.{name}", speech, name).read_bytes()
    cut = tmp_path / f"cut.{name}"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.warns(TruncatedAudioWarning, match="truncated.*lost"):
        audio = load_audio(cut)
    assert 0.3 * speech.size < audio.size < 0.7 * speech.size
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_audio(tmp_path / f"whole.{name}")  # the whole file warns about nothing


def test_request_refuses_empty_and_wrong_rate():
    with pytest.raises(ValueError, match="empty"):
        Request("r", np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="16000 Hz"):
        Request("r", np.zeros(10, np.float32), sample_rate=8000)


def test_request_audio_is_read_only():
    request = Request("r", np.ones(10, np.float32))
    with pytest.raises(ValueError):
        request.audio[0] = 2.0
