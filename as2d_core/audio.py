"""Reading request audio: 16 kHz mono WAV, with clear errors for everything else.

Audio at another rate is refused unless the caller asks for resampling, so a
silent conversion never changes what the models hear without the user knowing.
"""
from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from .contracts import SAMPLE_RATE


class AudioError(ValueError):
    """The audio cannot be used as a request; the message says why and what to do."""


def load_audio(path: str | Path, resample: bool = False) -> np.ndarray:
    """Float32 mono samples in [-1, 1] at 16 kHz."""
    path = Path(path)
    if not path.exists():
        raise AudioError(f"audio file not found: {path}")
    if path.stat().st_size == 0:
        raise AudioError(f"audio file is empty (0 bytes): {path}")
    try:
        with wave.open(str(path), "rb") as wav:
            channels, width, rate, frames = wav.getnchannels(), wav.getsampwidth(), wav.getframerate(), wav.getnframes()
            raw = wav.readframes(frames)
    except (wave.Error, EOFError) as exc:
        raise AudioError(f"cannot read {path} as a PCM WAV file ({exc}); convert it to 16 kHz mono 16-bit WAV") from exc
    if width not in (1, 2, 3, 4):
        raise AudioError(f"{path}: unsupported sample width of {width} bytes")
    usable = len(raw) // (width * channels) * width * channels
    if usable == 0:
        raise AudioError(f"audio file holds no samples: {path}")
    samples = _pcm_to_float(raw[:usable], width).reshape(-1, channels).mean(axis=1)
    if rate != SAMPLE_RATE:
        if not resample:
            raise AudioError(
                f"{path} is sampled at {rate} Hz; as2d models need {SAMPLE_RATE} Hz. "
                f"Pass --resample to convert it, or convert the file (e.g. `sox in.wav -r 16000 out.wav`)."
            )
        samples = resample_to_16k(samples, rate)
    return samples.astype(np.float32)


def _pcm_to_float(raw: bytes, width: int) -> np.ndarray:
    if width == 1:
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    if width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        values = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8
        return values.astype(np.float32) / float(1 << 23)
    dtype = {2: np.int16, 4: np.int32}[width]
    return np.frombuffer(raw, dtype).astype(np.float32) / float(np.iinfo(dtype).max + 1)


def resample_to_16k(samples: np.ndarray, rate: int) -> np.ndarray:
    """Band-limited resampling with a Hann-windowed sinc (quality enough for speech models)."""
    if rate <= 0:
        raise AudioError(f"invalid sample rate {rate}")
    ratio = SAMPLE_RATE / rate
    n_out = int(round(len(samples) * ratio))
    cutoff = min(1.0, ratio)  # relative to the input Nyquist
    half_width = 16
    times = np.arange(n_out) / ratio
    out = np.empty(n_out, dtype=np.float64)
    for start in range(0, n_out, 4096):
        t = times[start : start + 4096]
        base = np.floor(t).astype(np.int64)
        taps = np.arange(-half_width + 1, half_width + 1)
        idx = base[:, None] + taps[None, :]
        dist = t[:, None] - idx
        kernel = cutoff * np.sinc(cutoff * dist) * (0.5 + 0.5 * np.cos(np.pi * np.clip(dist / half_width, -1, 1)))
        valid = (idx >= 0) & (idx < len(samples))
        values = np.where(valid, samples[np.clip(idx, 0, len(samples) - 1)], 0.0)
        out[start : start + 4096] = (values * kernel).sum(axis=1)
    return out.astype(np.float32)
