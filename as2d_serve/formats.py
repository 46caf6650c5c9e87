"""The OpenAI response formats (json, text, verbose_json, srt, vtt) of one transcription.

Whisper decodes here without timestamps, so a response is one segment that
spans the whole upload; subtitles get one cue, and ``verbose_json`` says so
through its single segment rather than inventing times.
"""
from __future__ import annotations

from .service import Transcription

FORMATS = ("json", "text", "verbose_json", "srt", "vtt")


def _clock(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def as2d_fields(t: Transcription) -> dict:
    """as2d's own account of the request: how it was decoded, what the drafter did, where the time went."""
    r = t.result
    out = {
        "method": r.method,
        "source": r.source,
        "budget": r.budget,
        "proposed": r.proposed,
        "accepted": r.accepted,
        "acceptance": r.accepted / r.proposed if r.proposed else None,
        "verify_calls": r.verify_calls,
        "target_only_steps": r.target_only_steps,
        "tokens": r.tokens,
        "timings": {"prepare_s": r.prepare_s, "decode_s": r.decode_s, "drain_s": r.drain_s,
                    "e2e_s": r.e2e_s, "queued_s": t.queued_s, "total_s": t.total_s, "tps": r.tps},
        "fault": t.fault,
        "drafter_error": r.producer_error,
        "drafter_rebuilt": t.drafter_rebuilt,
        "note": r.note,
    }
    if r.exact is not None:
        out["exact"] = r.exact
    return out


def verbose_json(t: Transcription) -> dict:
    r = t.result
    segment = {"id": 0, "seek": 0, "start": 0.0, "end": t.duration_s, "text": r.text, "tokens": r.tokens,
               "temperature": 0.0}  # greedy; no log-probabilities are computed, so none are reported
    return {"task": "transcribe", "language": r.language, "duration": t.duration_s, "text": r.text,
            "segments": [segment] if r.text.strip() else [], "as2d": as2d_fields(t)}


def subtitles(t: Transcription, kind: str) -> str:
    text = t.result.text.strip()
    if kind == "srt":
        return f"1\n{_clock(0, ',')} --> {_clock(t.duration_s, ',')}\n{text}\n" if text else ""
    return "WEBVTT\n\n" + (f"{_clock(0, '.')} --> {_clock(t.duration_s, '.')}\n{text}\n" if text else "")
