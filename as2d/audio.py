"""faster-whisper's ``faster_whisper.audio``: audio in the forms its users pass, as the models' 16 kHz mono samples."""
from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import numpy as np

from as2d_core.contracts import SAMPLE_RATE
from as2d_core.input.audio import mono_samples, read_audio

N_FRAMES = 3000  # the log-mel frames of one 30 s input


def decode_audio(input_file: str | Path | BinaryIO, sampling_rate: int = SAMPLE_RATE, split_stereo: bool = False):
    """faster-whisper's ``decode_audio``: 16 kHz mono float32 samples of any file FFmpeg reads (``as2d_core.input.audio``)."""
    if sampling_rate != SAMPLE_RATE or split_stereo:
        raise ValueError(f"decode_audio gives {SAMPLE_RATE} Hz mono, the models' input; sampling_rate="
                         f"{sampling_rate} and split_stereo={split_stereo} are not supported")
    return audio_samples(input_file)


def audio_samples(audio) -> np.ndarray:
    """A path, bytes, a file object or samples, as 16 kHz mono float32 samples (what ``transcribe`` takes)."""
    if isinstance(audio, np.ndarray):
        return mono_samples(audio, "the audio samples")
    if isinstance(audio, (str, Path)):
        return read_audio(audio).samples
    if isinstance(audio, (bytes, bytearray)):
        return read_audio(bytes(audio)).samples
    if isinstance(audio, io.IOBase) or hasattr(audio, "read"):
        return read_audio(audio.read()).samples
    raise TypeError(f"audio must be a path, a file object or 16 kHz float32 samples, not {type(audio).__name__}")


def pad_or_trim(array: np.ndarray, length: int = N_FRAMES, *, axis: int = -1) -> np.ndarray:
    """faster-whisper's ``pad_or_trim``: ``array`` cut to ``length`` along ``axis``, or padded there with zeros."""
    size = array.shape[axis]
    if size > length:
        return array.take(indices=range(length), axis=axis)
    if size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        return np.pad(array, widths)
    return array
