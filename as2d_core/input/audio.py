"""Reading request audio from any common file format, as the models need it: 16 kHz mono float32.

Decoding is FFmpeg's (through PyAV), so wav in every PCM and float encoding, flac, ogg/vorbis,
opus, mp3, m4a/aac and webm all read the same way. Other sample rates and channel layouts are
converted by default, as faster-whisper and whisper.cpp do (channels averaged, resampled with
soxr); ``AudioInfo`` records what the file was and what was converted, so a caller can say it.
"""
from __future__ import annotations

import warnings
import io
from pathlib import Path

import attrs
import av
import numpy as np
import soxr

from as2d_core.contracts import SAMPLE_RATE

# A decoded length this much shorter than the container declares counts as a truncated file.
_TRUNCATION_TOLERANCE_S = 0.05


class AudioError(ValueError):
    """The audio cannot be used as a request; the message says why and what to do."""


class TruncatedAudioWarning(UserWarning):
    """The file ends before its header says it should; what was decoded is still used."""


@attrs.frozen
class AudioInfo:
    """What the file held and what was done to it."""

    path: str
    container: str
    codec: str
    sample_rate: int
    channels: int
    sample_format: str
    duration_s: float  # of the decoded audio
    declared_duration_s: float | None = None  # what the container says, when it says
    warnings: tuple[str, ...] = ()

    @property
    def conversions(self) -> list[str]:
        done = []
        if self.channels != 1:
            done.append(f"mixed {self.channels} channels down to mono")
        if self.sample_rate != SAMPLE_RATE:
            done.append(f"resampled {self.sample_rate} Hz to {SAMPLE_RATE} Hz")
        return done

    def as_dict(self) -> dict:
        out = attrs.asdict(self)
        out["warnings"] = list(self.warnings)
        out["conversions"] = self.conversions
        return out


@attrs.frozen
class DecodedAudio:
    samples: np.ndarray = attrs.field(repr=False)  # float32 mono at 16 kHz
    info: AudioInfo

    @property
    def duration_s(self) -> float:
        return self.samples.size / SAMPLE_RATE


def load_audio(path: str | Path) -> np.ndarray:
    """Float32 mono samples at 16 kHz (a truncated file gives a ``TruncatedAudioWarning``)."""
    decoded = read_audio(path)
    for message in decoded.info.warnings:
        warnings.warn(message, TruncatedAudioWarning, stacklevel=2)
    return decoded.samples


def mono_samples(samples, label: str = "the samples") -> np.ndarray:
    """Samples a caller passes in memory, checked as the models need them: float32 mono at 16 kHz, in [-1, 1].

    Integers, several channels and NaN are refused rather than read as garbage (an int16 array taken as float
    transcribes noise; a stereo array flattened interleaves its channels). A file's audio goes through
    ``read_audio``, which converts these itself.
    """
    array = np.asarray(samples)
    if array.dtype.kind in "iu":
        scale = f" (samples / {2 ** (8 * array.dtype.itemsize - 1)})" if array.dtype.kind == "i" else ""
        raise AudioError(f"{label} are {array.dtype} integers; the models take float samples in [-1, 1]: "
                         f"scale them first{scale}")
    if array.dtype.kind != "f":
        raise AudioError(f"{label} must be float samples in [-1, 1], not {array.dtype}")
    if sum(size > 1 for size in array.shape) > 1:
        raise AudioError(f"{label} have shape {array.shape}, several channels; the models take one: "
                         f"average them first (for example samples.mean(axis=1) for (samples, channels))")
    array = np.ascontiguousarray(array.reshape(-1), dtype=np.float32)
    bad = ~np.isfinite(array)
    if bad.any():
        raise AudioError(f"{label} hold {int(bad.sum())} NaN or infinite values (the first at "
                         f"{int(np.argmax(bad)) / SAMPLE_RATE:.3f} s)")
    return array


def read_audio(source: str | Path | bytes, label: str = "the uploaded audio") -> DecodedAudio:
    """Decode, mix down and resample a file (``source`` a path) or a file's bytes (an upload, named
    ``label`` in messages); every unusable input is an ``AudioError``."""
    if isinstance(source, (bytes, bytearray)):
        path = label
        if not source:
            raise AudioError(f"audio file is empty (0 bytes): {label}")

        def open_file():
            return io.BytesIO(source)
    else:
        path = Path(source)
        if not path.exists():
            raise AudioError(f"audio file not found: {path}")
        if path.is_dir():
            raise AudioError(f"{path} is a folder, not an audio file")
        if path.stat().st_size == 0:
            raise AudioError(f"audio file is empty (0 bytes): {path}")

        def open_file():
            return open(path, "rb")
    with open_file() as raw:
        try:
            container = av.open(raw)
        except av.error.FFmpegError as exc:
            raise AudioError(f"cannot read {path}: not audio that can be decoded ({_reason(exc)})") from exc
        with container:
            if not container.streams.audio:
                kinds = ", ".join(sorted({s.type for s in container.streams})) or "none"
                raise AudioError(f"{path} has no audio stream (streams: {kinds})")
            stream = container.streams.audio[0]
            codec = stream.codec_context
            rate, channels = codec.sample_rate, codec.channels
            with open_file() as file:
                declared = _wav_declared_duration(file)
            if declared is None:
                declared = _declared_duration(container, stream)
            blocks, failure = _decode(container, stream)
            info_fields = dict(
                path=str(path), container=container.format.name, codec=codec.name,
                sample_rate=rate, channels=channels, sample_format=codec.format.name if codec.format else "unknown",
            )
    if not blocks:
        if failure:
            raise AudioError(f"cannot decode {path}: {failure}")
        raise AudioError(f"audio file holds no samples: {path}")
    interleaved = np.concatenate(blocks, axis=0)
    _refuse_non_finite(interleaved, path, rate)
    mono = interleaved.mean(axis=1, dtype=np.float32) if interleaved.shape[1] > 1 else interleaved[:, 0]
    decoded_s = mono.size / rate
    samples = mono if rate == SAMPLE_RATE else soxr.resample(mono, rate, SAMPLE_RATE)
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    if samples.size == 0:
        raise AudioError(f"audio file holds no samples: {path}")
    notes = []
    if failure:
        notes.append(f"{path} is damaged or truncated: decoding stopped at {decoded_s:.2f} s ({failure}); "
                     f"the rest is lost" + (f" (the file declares {declared:.2f} s)" if declared else ""))
    elif declared is not None and decoded_s < declared - _TRUNCATION_TOLERANCE_S:
        notes.append(f"{path} is truncated: it declares {declared:.2f} s but holds {decoded_s:.2f} s; "
                     f"the last {declared - decoded_s:.2f} s are lost")
    info = AudioInfo(**info_fields, duration_s=decoded_s, declared_duration_s=declared, warnings=tuple(notes))
    return DecodedAudio(samples, info)


def _decode(container, stream) -> tuple[list[np.ndarray], str | None]:
    """Frames as (samples, channels) float32 blocks; a decoding failure ends the list and is returned."""
    blocks: list[np.ndarray] = []
    to_float = None
    try:
        for frame in container.decode(stream):
            if to_float is None:
                # same rate and layout, only the sample format changes: packed float32
                to_float = av.AudioResampler(format="flt", layout=frame.layout, rate=frame.sample_rate)
            for converted in to_float.resample(frame):
                blocks.append(converted.to_ndarray().reshape(-1, len(converted.layout.channels)))
        if to_float is not None:
            for converted in to_float.resample(None):
                blocks.append(converted.to_ndarray().reshape(-1, len(converted.layout.channels)))
    except av.error.FFmpegError as exc:
        return blocks, _reason(exc)
    return [b for b in blocks if b.size], None


def _declared_duration(container, stream) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    return None


def _wav_declared_duration(file) -> float | None:
    """The length a RIFF/WAVE header declares (data size / byte rate): FFmpeg trusts the file size instead."""
    head = file.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    byte_rate = None
    while len(chunk := file.read(8)) == 8:
        size = int.from_bytes(chunk[4:], "little")
        if chunk[:4] == b"fmt " and size >= 12:
            byte_rate = int.from_bytes(file.read(12)[8:12], "little")
            size -= 12
        elif chunk[:4] == b"data":
            return size / byte_rate if byte_rate and size != 0xFFFFFFFF else None
        file.seek(size + (size & 1), 1)
    return None


def _refuse_non_finite(samples: np.ndarray, path: Path, rate: int) -> None:
    bad = ~np.isfinite(samples)
    if bad.any():
        first = int(np.argmax(bad.any(axis=1)))
        raise AudioError(
            f"{path} holds {int(bad.sum())} NaN or infinite samples (the first at {first / rate:.3f} s); "
            f"the audio is corrupt"
        )


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)
