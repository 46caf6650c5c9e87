"""Whisper's log-mel front end in numpy.

It follows faster-whisper's FeatureExtractor step by step (same STFT framing,
the same 160 trailing zero samples, the same slaney filters and normalisation),
because greedy decoding only matches faster-whisper token for token when the
encoder sees the same features.
"""
from __future__ import annotations

import functools

import numpy as np
import numpy.fft  # noqa: F401 - numpy imports it on first use, and a drafter thread at a low priority (a busy
# host, a guessed language) that first used it held its import lock while the target's log-mel waited: about a
# second of the README's first call beside two busy processes (BENCHMARKS.md section 47). Imported here, at load.
from threadpoolctl import ThreadpoolController

from as2d_core.contracts import Request

SAMPLE_RATE = 16_000
N_FFT = 400
HOP_LENGTH = 160
N_FRAMES = 3000  # 30 s
STFT_BLOCK = 2048  # frames transformed at once (about 20 s of audio)


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int = 80, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-style mel filterbank [n_mels, n_fft // 2 + 1] (as librosa with htk=False)."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    max_mel = min_log_mel + np.log(sr / 2 / min_log_hz) / logstep
    mels = np.linspace(0.0, max_mel, n_mels + 2)
    freqs = f_sp * mels
    log_region = mels >= min_log_mel
    freqs[log_region] = min_log_hz * np.exp(logstep * (mels[log_region] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : n_mels + 2] - freqs[:n_mels]))[:, None]
    return weights.astype(np.float32)


def _power_spectrogram(audio: np.ndarray, block: int = STFT_BLOCK) -> np.ndarray:
    """|STFT|^2 with a periodic Hann window and centred reflect padding, last frame dropped: [freq, frames].

    The frames are transformed ``block`` at a time into one output, each row as alone (the same bits): the whole
    file's complex spectrum at once (106 MB for 330 s) cost 0.7-1.7 s on a process's first file here, in fresh
    memory, against 0.1 s by blocks (BENCHMARKS.md section 29).
    """
    pad = N_FFT // 2
    x = np.pad(audio, (pad, pad), mode="reflect")
    n_frames = 1 + (x.size - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.as_strided(x, (n_frames, N_FFT), (HOP_LENGTH * x.strides[0], x.strides[0]))
    window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    power = np.empty((N_FFT // 2 + 1, n_frames - 1), np.float32)
    for start in range(0, n_frames - 1, block):
        end = min(start + block, n_frames - 1)
        spec = np.fft.rfft(frames[start:end] * window, n=N_FFT, axis=-1).astype(np.complex64)
        power[:, start:end] = (np.abs(spec) ** 2).T
    return power


# numpy's BLAS pool (OpenBLAS) keeps its idle workers spinning after each product, and the
# filterbank product is far too small to need them: on two cores the spinning worker took a
# core from the target's encoder (its preparation took 0.53 s instead of 0.61 s, median of 28,
# with one BLAS thread; BENCHMARKS.md section 6). The controller is built once (it scans the
# loaded libraries); the limit is set around the product only, so no other numpy user is touched.
_numpy_blas = ThreadpoolController()


def log_mel(audio: np.ndarray, n_mels: int = 80, keep_last_frame: bool = False) -> np.ndarray:
    """Log-mel of the whole clip before padding to 30 s: [n_mels, frames].

    faster-whisper appends 160 zero samples, takes the STFT and then drops the
    final frame for transcription (``keep_last_frame`` keeps it, as its
    language detection does).
    """
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    audio = np.pad(audio, (0, HOP_LENGTH))
    power = _power_spectrogram(audio)
    with _numpy_blas.limit(limits=1, user_api="blas"):
        mel = mel_filters(n_mels) @ power
    log_spec = np.log10(np.clip(mel, 1e-10, None))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    log_spec = (log_spec + 4.0) / 4.0
    return log_spec if keep_last_frame else log_spec[:, :-1]


def request_log_mel(request: Request, n_mels: int = 80) -> np.ndarray:
    """The request's ``log_mel`` (read-only), shared through its ``feature_cache``; for a long-form request, its
    frames of its recording's log-mel, as faster-whisper slices each 30 s out of the whole file's features.

    The target and a drafter started with the request both want its log-mel at arrival;
    the later caller waits for the first one's result instead of repeating it (in a niced
    drafter, that numpy work also held the GIL the target needed: BENCHMARKS.md section 6).
    """
    if request.recording is not None:  # a long-form request: its frames of the recording's log-mel
        whole = request.recording.shared(("whisper-log-mel", n_mels), lambda: _read_only(log_mel(
            request.recording.audio, n_mels)))
        start = request.offset // HOP_LENGTH
        return whole[:, start : start + request.audio.size // HOP_LENGTH]
    return request.feature_cache.shared(("whisper-log-mel", n_mels),
                                        lambda: _read_only(log_mel(request.audio, n_mels)))


def _read_only(features: np.ndarray) -> np.ndarray:
    features.flags.writeable = False
    return features


def pad_or_trim(features: np.ndarray, frames: int = N_FRAMES) -> np.ndarray:
    """Cut or zero-pad (in the log-mel domain, as faster-whisper does) to ``frames``."""
    features = features[:, :frames]
    if features.shape[1] < frames:
        features = np.pad(features, ((0, 0), (0, frames - features.shape[1])))
    return np.ascontiguousarray(features, dtype=np.float32)


def encoder_input(audio: np.ndarray, n_mels: int = 80) -> np.ndarray:
    """The first 30 s window of features as the encoder takes it: [1, n_mels, 3000]."""
    return pad_or_trim(log_mel(audio, n_mels))[None]


def request_encoder_input(request: Request, n_mels: int = 80) -> np.ndarray:
    """``encoder_input`` of the request's audio, from its shared log-mel (``request_log_mel``)."""
    return pad_or_trim(request_log_mel(request, n_mels))[None]


def quiet_cuts(features: np.ndarray, chunk_frames: int, search_frames: int = 200, smooth_frames: int = 10) -> list[int]:
    """Frame offsets splitting ``features`` into balanced chunks of about ``chunk_frames`` or fewer.

    Each cut is the quietest moment (lowest mean log-mel over ``smooth_frames``) within
    ``search_frames`` of an even split, so a drafter decoding chunk by chunk seldom cuts a
    word. The offsets start with 0 and end with the frame count.
    """
    total = features.shape[1]
    parts = -(-total // chunk_frames)
    if parts <= 1:
        return [0, total]
    loudness = np.convolve(features.mean(axis=0), np.ones(smooth_frames) / smooth_frames, mode="same")
    cuts = [0]
    for part in range(1, parts):
        even = part * total // parts
        low, high = max(cuts[-1] + smooth_frames, even - search_frames), min(total - smooth_frames, even + search_frames)
        cuts.append(low + int(np.argmin(loudness[low:high])) if high > low else even)
    return cuts + [total]
