"""Writing test audio in the formats people record in, with PyAV (the same library that reads them)."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import soxr

# name -> (container, codec, sample rate, channel layout)
FORMATS = {
    "flac": ("flac", "flac", 16000, "mono"),
    "ogg": ("ogg", "libopus", 48000, "mono"),
    "mp3": ("mp3", "libmp3lame", 44100, "stereo"),
    "f32.wav": ("wav", "pcm_f32le", 16000, "mono"),
    "s24.wav": ("wav", "pcm_s24le", 22050, "stereo"),
    "s16.wav": ("wav", "pcm_s16le", 16000, "mono"),
}


def encode(path: Path, samples: np.ndarray, name: str) -> Path:
    """``samples`` (16 kHz mono float32) written as format ``name``, resampled and duplicated to its layout."""
    container, codec, rate, layout = FORMATS[name]
    audio = samples if rate == 16000 else soxr.resample(samples, 16000, rate)
    channels = 2 if layout == "stereo" else 1
    planar = np.tile(np.asarray(audio, np.float32)[None, :], (channels, 1))
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate)
        stream.layout = layout
        frame = av.AudioFrame.from_ndarray(planar, format="fltp", layout=layout)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path
