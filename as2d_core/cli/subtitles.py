"""SubRip (SRT) and WebVTT text of cues ``(start_s, end_s, text)``: a transcript's segments (one per
timestamp segment in timestamp mode, one per window without), with their times in the file."""
from __future__ import annotations

from collections.abc import Iterable


def _timestamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(cues: Iterable[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    # a cue's text cannot hold an empty line (it would end the cue)
    return [(start, end, " ".join(text.split())) for start, end, text in cues if text.strip()]


def to_srt(cues: Iterable[tuple[float, float, str]]) -> str:
    blocks = [f"{n}\n{_timestamp(a, ',')} --> {_timestamp(b, ',')}\n{text}\n"
              for n, (a, b, text) in enumerate(_cues(cues), start=1)]
    return "\n".join(blocks)


def to_vtt(cues: Iterable[tuple[float, float, str]]) -> str:
    blocks = [f"{_timestamp(a, '.')} --> {_timestamp(b, '.')}\n{text}\n" for a, b, text in _cues(cues)]
    return "\n".join(["WEBVTT\n", *blocks])
