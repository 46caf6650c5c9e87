"""What one decoded request returns: tokens, text, both clocks, counts and segments."""
from __future__ import annotations

from typing import Any

import attrs

from as2d_core.capabilities import TimestampVocabulary, Word, forced_tokens
from as2d_core.contracts import Request, TargetSession
from as2d_core.decode.events import Decomposition, EventLog, decompose
from as2d_core.decode.loop import Counters
from as2d_core.decode.timestamps import Segment, response_segments


@attrs.define
class DecodeResult:
    request_id: str
    method: str
    language: str
    tokens: list[int]
    text: str
    decode_s: float  # post-prefill clock (Appendix A.3)
    prepare_s: float  # arrival to the decode clock: the target's audio encoding and prefill (and, prepared, the drafter's)
    source: str | None = None
    budget: int | None = None
    start: str | None = None  # when the drafter started: arrival | prepared
    drain_s: float = 0.0  # stopping the producer after the final token (charged separately)
    proposed: int = 0
    accepted: int = 0
    verify_calls: int = 0
    verify_widths: list[int] = attrs.Factory(list)
    target_only_steps: int = 0
    note: str | None = None
    producer_error: str | None = None
    published: int = 0
    decomposition: Decomposition | None = None
    clock: tuple[float, float] = (0.0, 0.0)  # perf_counter() at the start of the decode clock and at the final commit
    events: Any = attrs.field(default=None, repr=False)
    trace: list[dict] = attrs.field(factory=list, repr=False)
    batches: tuple = attrs.field(default=(), repr=False)
    exact: bool | None = None
    # by the response's timestamp tokens in timestamp mode, else the request as one; times from the request's start
    segments: list[Segment] = attrs.Factory(list)
    # with ``Request.word_timestamps``: the response's words (``as2d_core.decode.words``) and what timing them cost
    words: list[Word] = attrs.Factory(list)
    words_s: float | None = None
    # with ``Request.scores``: faster-whisper's avg_logprob and no_speech_prob of the response (``decode.scores``)
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    # (first timestamp id, end token) when the target decoded in timestamp mode: replay re-proposes as the engine did
    timestamp_ids: tuple[int, int] | None = None

    @property
    def e2e_s(self) -> float:
        return self.prepare_s + self.decode_s

    @property
    def tps(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The JSON-ready fields of ``as2d run --json``."""
        out = {
            "request_id": self.request_id,
            "text": self.text,
            "tokens": self.tokens,
            "language": self.language,
            "method": self.method,
            "source": self.source,
            "budget": self.budget,
            "start": self.start,
            "decode_s": self.decode_s,
            "tps": self.tps,
            "e2e_s": self.e2e_s,
            "prepare_s": self.prepare_s,
            "drain_s": self.drain_s,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "verify_calls": self.verify_calls,
            "verify_widths": self.verify_widths,
            "target_only_steps": self.target_only_steps,
            "published": self.published,
            "note": self.note,
            "producer_error": self.producer_error,
            "segments": [segment.as_dict() for segment in self.segments],
        }
        if self.decomposition is not None:
            out["decomposition"] = self.decomposition.as_dict()
        if self.words_s is not None:
            out["words"] = [word.as_dict() for word in self.words]
            out["words_s"] = self.words_s
        if self.no_speech_prob is not None:
            out["avg_logprob"], out["no_speech_prob"] = self.avg_logprob, self.no_speech_prob
        if self.exact is not None:
            out["exact"] = self.exact
        return out



def timestamp_ids(request: Request, session: TargetSession) -> tuple[int, int] | None:
    """(first timestamp id, end token) when ``session`` decodes ``request`` in timestamp mode, else None: what a
    result records so its segments, replay's proposals and the long-form seek can read its timestamps."""
    if request.timestamps == "none" or not isinstance(session, TimestampVocabulary):
        return None
    return session.timestamp_begin, session.eos_token


def build_result(
    request: Request,
    method: str,
    session: TargetSession,
    tokens: list[int],
    text: str,
    clock: tuple[float, float],
    prepare_s: float,
    counters: Counters,
    events: EventLog,
    trace: list[dict],
    **fields: Any,
) -> DecodeResult:
    """One run's result, with its time decomposition on the decode clock and its segments; the tokens begin with
    the session's forced start, if any (``capabilities.ForcedStart``)."""
    forced = forced_tokens(session)
    if forced:
        tokens = forced + list(tokens)
        text = session.decode_text(tokens)
    return DecodeResult(
        request_id=request.request_id,
        method=method,
        language=session.language,
        tokens=tokens,
        text=text,
        decode_s=clock[1] - clock[0],
        prepare_s=prepare_s,
        proposed=counters.proposed,
        accepted=counters.accepted,
        verify_calls=counters.verify_calls,
        verify_widths=counters.widths,
        target_only_steps=counters.target_only_steps,
        decomposition=decompose(events.events, *clock),
        clock=clock,
        events=events.events,
        trace=trace,
        segments=response_segments(request, session, tokens, text),
        **fields,
    )
