"""Uploaded bytes to 16 kHz mono samples, never through a path on the server's disk.

Decoding is libsndfile's (through soundfile) from memory; channels are averaged
and other rates resampled as ``as2d_core.audio`` does; a WAV whose header
declares more frames than it holds is refused as truncated, so a cut upload is
never transcribed as if it were whole.
"""
from __future__ import annotations

import io
import wave

import numpy as np
import soundfile
import soxr

from as2d_core.contracts import SAMPLE_RATE

from .service import InputError


class UploadError(InputError):
    """The upload is not usable audio; the message names the problem."""


def decode_upload(data: bytes) -> np.ndarray:
    """Float32 mono samples at 16 kHz from an uploaded file's bytes."""
    if not data:
        raise UploadError("the uploaded file is empty (0 bytes)")
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        reason = getattr(exc, "error_string", None) or str(exc)
        raise UploadError(f"the uploaded file is not audio that can be decoded ({reason}); send WAV, FLAC or OGG") from exc
    _refuse_truncated_wav(data, len(samples))
    if len(samples) == 0:
        raise UploadError("the uploaded audio holds no samples")
    if not np.isfinite(samples).all():
        raise UploadError("the uploaded audio holds NaN or infinite samples")
    mono = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0].copy()
    # other rates are converted as `as2d run` converts them (as2d_core.audio: soxr)
    return mono if rate == SAMPLE_RATE else np.ascontiguousarray(soxr.resample(mono, rate, SAMPLE_RATE), np.float32)


def _refuse_truncated_wav(data: bytes, decoded_frames: int) -> None:
    if not data.startswith(b"RIFF"):
        return
    try:
        with wave.open(io.BytesIO(data)) as wav:
            declared = wav.getnframes()
    except (wave.Error, EOFError):
        return  # a WAV that wave cannot parse (float, extensible) was decoded by libsndfile already
    if decoded_frames < declared:
        raise UploadError(f"the uploaded WAV is truncated: its header declares {declared} frames, it holds {decoded_frames}")
