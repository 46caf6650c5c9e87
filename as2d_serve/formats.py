"""The OpenAI response formats (json, text, verbose_json, srt, vtt) of one transcription.

A segment is one of the transcript's segments: in timestamp mode (``timestamps = "segment"`` in the
server's configuration, ``--timestamps segment``, or a request's ``timestamp_granularities`` segment) one
per pair of Whisper's timestamps, otherwise one window of the core's ``Pipeline`` (at most 30 s, cut at
pauses), with the window's times. With the word granularity, ``words`` lists every word in the file's time.
Each segment carries its window's ``avg_logprob``, ``no_speech_prob`` and ``compression_ratio``, computed as
faster-whisper computes them (``as2d_core.decode.scores``), its ``seek`` (the request's start, in mel frames) and
the ``temperature`` its request was kept at (above 0 after the temperature fallback, or when the request asks).
"""
from __future__ import annotations

import math

import langcodes
from fastapi.responses import JSONResponse

from as2d_core.cli.subtitles import to_srt, to_vtt, transcript_cues
from as2d_core.decode.scores import compression_ratio
from as2d_core.input.seek import HOP

from .service import Transcription

FORMATS = ("json", "text", "verbose_json", "srt", "vtt")


def error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
          headers: dict | None = None) -> JSONResponse:
    """OpenAI's error shape, so clients raise their usual exception with our message."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": status}},
                        status_code=status, headers=headers)


def server_fault(exc: BaseException) -> JSONResponse:
    """A fault of the server's, not the request's: answered 500 with what went wrong."""
    return error(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")


def as2d_fields(t: Transcription) -> dict:
    """as2d's own account of the request: how it was decoded, what the drafter did, where the time went."""
    results = t.results
    first = results[0] if results else None
    totals = t.transcript.totals()
    out = {
        "method": first.method if first else None,
        "source": next((r.source for r in results if r.source), None),
        "budget": next((r.budget for r in results if r.budget), None),
        "proposed": totals["proposed"],
        "accepted": totals["accepted"],
        "acceptance": totals["accepted"] / totals["proposed"] if totals["proposed"] else None,
        "verify_calls": sum(r.verify_calls for r in results),
        "target_only_steps": sum(r.target_only_steps for r in results),
        "tokens": [token for r in results for token in r.tokens],
        "windows": [{"start_s": w.start_s, "end_s": w.end_s, "tokens": w.tokens, "proposed": w.result.proposed,
                     "accepted": w.result.accepted, "drafter_error": w.result.producer_error, "note": w.result.note}
                    for w in t.transcript.windows],
        "timings": {"prepare_s": sum(r.prepare_s for r in results), "decode_s": totals["decode_s"],
                    "e2e_s": totals["e2e_s"], "wall_s": totals["wall_s"], "queued_s": t.queued_s,
                    "total_s": t.total_s, "tps": totals["tps"]},
        "fault": t.fault,
        "drafter_error": t.drafter_error,
        "drafter_rebuilt": t.drafter_rebuilt,
        "batch": t.batch,
        "notes": t.transcript.notes + [r.note for r in results if r.note],
    }
    if t.transcript.exact is not None:
        out["exact"] = t.transcript.exact
    return out


# Whisper's (and so OpenAI's) English names where the CLDR's, which langcodes gives, are spelled otherwise
WHISPER_NAMES = {"bn": "bengali", "my": "myanmar", "nn": "nynorsk", "mi": "maori", "tl": "tagalog"}


def language_name(code: str | None) -> str | None:
    """verbose_json's ``language``: the language's English name in lower case, as OpenAI gives it ("english");
    a code no registry knows stays as it is."""
    if code is None or code in WHISPER_NAMES:
        return WHISPER_NAMES.get(code)
    try:
        language = langcodes.Language.get(code)
    except (ValueError, LookupError):
        return code
    return language.display_name().lower() if language.is_valid() else code


def _number(value: float | None) -> float | None:
    """A score as JSON has it: null where there is none (a target that keeps none; an empty window's average)."""
    return None if value is None or not math.isfinite(value) else value


def verbose_json(t: Transcription, task: str = "asr") -> dict:
    """OpenAI's verbose_json; words where the request's granularities (or the server's default) asked for them."""
    pairs = [(w, s) for w in t.transcript.windows for s in w.segments]
    segments = [{"id": i, "seek": w.window.start // HOP, "start": s.start_s, "end": s.end_s, "text": s.text,
                 "tokens": list(s.tokens), "temperature": w.temperature or 0.0,
                 "avg_logprob": _number(w.result.avg_logprob),
                 "compression_ratio": compression_ratio(w.result.text.strip()),
                 "no_speech_prob": _number(w.result.no_speech_prob)}
                for i, (w, s) in enumerate(pairs)]
    language = language_name(t.results[0].language) if t.results else None
    out = {"task": "translate" if task == "translate" else "transcribe", "language": language,
           "duration": t.duration_s, "text": t.transcript.text, "segments": segments,
           "usage": {"type": "duration", "seconds": t.duration_s}}
    if t.words:  # in the file's time; OpenAI's words carry no spaces (Whisper's keep the leading one)
        timed = [w.shifted(window.start_s) for window in t.transcript.windows for w in window.result.words]
        out["words"] = [{"word": w.word.strip(), "start": w.start_s, "end": w.end_s, "probability": w.probability}
                        for w in timed]
    out["as2d"] = as2d_fields(t)
    return out


def stream_done(t: Transcription) -> dict:
    """The last event of ``stream=true``: the whole text, the tokens it took, and as2d's account."""
    tokens = sum(len(r.tokens) for r in t.results)  # the audio is not counted in tokens: input_tokens 0
    return {"type": "transcript.text.done", "text": t.transcript.text,
            "usage": {"type": "tokens", "input_tokens": 0, "output_tokens": tokens, "total_tokens": tokens},
            "as2d": as2d_fields(t)}


def subtitles(t: Transcription, kind: str) -> str:
    cues = transcript_cues(t.transcript)
    return to_srt(cues) if kind == "srt" else to_vtt(cues)
