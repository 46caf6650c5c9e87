"""NeMo's log-mel front end (AudioToMelSpectrogramPreprocessor at inference) in NumPy.

The exported graph starts at features, so the drafter computes them itself:
pre-emphasis 0.97, centred 512-point FFT of a 400-sample symmetric Hann window
every 160 samples, power spectrum, Slaney mel filterbank, log with a 2^-24
guard, then per-feature normalisation over the valid frames. It matches
onnx-asr's NeMo preprocessor, so a folder behaves the same in both.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

N_FFT, WIN, HOP, PREEMPH, LOG_GUARD = 512, 400, 160, 0.97, 2.0**-24


def _hz_to_mel(f):
    f = np.asarray(f, np.float64)
    linear = f / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, linear)


def _mel_to_hz(m):
    m = np.asarray(m, np.float64)
    linear = m * (200.0 / 3)
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0))
    return np.where(m >= 15.0, log_part, linear)


def mel_filterbank(n_mels: int, sample_rate: int = 16000, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-scale, Slaney-normalised triangular filters (librosa's default), shape [n_fft//2+1, n_mels]."""
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.T.astype(np.float32)


_WINDOW = np.pad(np.hanning(WIN), ((N_FFT - WIN) // 2, (N_FFT - WIN) // 2))


@lru_cache(maxsize=None)
def _bank(n_mels: int) -> np.ndarray:
    """The filterbank, built once per size: ``log_mel`` runs for every chunk and the bank never changes."""
    bank = mel_filterbank(n_mels)
    bank.flags.writeable = False
    return bank


def log_mel(samples: np.ndarray, n_mels: int = 80) -> tuple[np.ndarray, int]:
    """Features [n_mels, frames] of one 16 kHz waveform and the number of valid frames."""
    bank = _bank(n_mels)
    x = np.asarray(samples, np.float32)
    x = np.concatenate([x[:1], x[1:] - PREEMPH * x[:-1]])
    x = np.pad(x, (N_FFT // 2, N_FFT // 2))
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP] * _WINDOW
    power = (np.abs(np.fft.rfft(frames, N_FFT)) ** 2).astype(np.float32)
    logmel = np.log(power @ bank + LOG_GUARD)
    valid = max(2, min(len(samples) // HOP, logmel.shape[0]))
    mean = logmel[:valid].mean(0)
    std = np.sqrt(((logmel[:valid] - mean) ** 2).sum(0) / (valid - 1))
    features = (logmel - mean) / (std + 1e-5)
    features[valid:] = 0.0
    return features.T.astype(np.float32), valid
