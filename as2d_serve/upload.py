"""Uploaded bytes to 16 kHz mono samples, never through a path on the server's disk.

Decoded from memory by the same reader as ``as2d run`` (``as2d_core.input.audio.read_audio``: PyAV, soxr),
so every format the command takes is taken here. Unlike the command, which transcribes a truncated
file as far as it goes and warns, a truncated upload is refused: a client that sent half a file
should hear so rather than get half a transcript.
"""
from __future__ import annotations

import numpy as np

from as2d_core.input.audio import AudioError, read_audio

from .service import InputError

LABEL = "the uploaded file"


class UploadError(InputError):
    """The upload is not usable audio; the message names the problem."""


def decode_upload(data: bytes) -> np.ndarray:
    """Float32 mono samples at 16 kHz from an uploaded file's bytes."""
    try:
        decoded = read_audio(bytes(data), label=LABEL)
    except AudioError as exc:
        raise UploadError(str(exc)) from exc
    if decoded.info.warnings:
        raise UploadError("; ".join(decoded.info.warnings))
    return decoded.samples
