"""Operation trajectories of one decode, in the format of docs/traces.md.

A trace holds what a later replay needs to price a run under other costs:
which candidates were visible when (publication times), which target calls
were made on which candidates and how many were accepted, what each call
committed, and every model span. Times are seconds from the request (the
start of the decode clock).
"""
from __future__ import annotations

from as2d_core.decode.result import DecodeResult
from as2d_core.decode.events import TARGET_KINDS

FORMAT = "as2d-trace/1"


def build_trace(window: str, result: DecodeResult, label: str | None = None) -> dict:
    """One JSON-ready trace record for ``result`` (as2d engine or a serial baseline).

    ``label`` is the bench's name of the run (``as2d@pocketsphinx`` for a later source); ``method``
    stays the method itself so a replay knows how to price it.
    """
    t0 = result.clock[0]

    def rel(t: float) -> float:
        return round(t - t0, 9)

    events = [e for e in (result.events or ()) if e.kind != "prepare"]
    target_events = sorted((e for e in events if e.kind in TARGET_KINDS), key=lambda e: e.start)
    published: list[dict] = []
    calls: list[dict] = []
    if result.batches:  # decoupled drafting: the producer's immutable batches
        for b in result.batches:
            published.append({"offset": b.offset, "tokens": list(b.tokens), "t": rel(b.published_at),
                              "confidences": list(b.confidences) if b.confidences else None, "final": b.final})
    rounds = [t for t in result.trace if t["kind"] in TARGET_KINDS]
    for t in result.trace:
        if t["kind"] == "draft":  # serial drafting: a round's candidates appear when its draft ends
            published.append({"offset": t["offset"], "tokens": list(t["candidates"]), "t": rel(t["end"]),
                              "drafted": t["drafted"], "draft_start": rel(t["start"])})
    for i, t in enumerate(rounds):
        end = t.get("end", target_events[i].end if i < len(target_events) else t["start"])
        accepted = t["accepted"]
        calls.append({
            "kind": t["kind"],
            "t0": rel(t["start"]),
            "t1": rel(end),
            "root": t["root"],
            "anchor": t.get("anchor"),
            "visible": t.get("published"),
            "candidates": list(t["candidates"]),
            "width": len(t["candidates"]) + 1,
            "accepted": accepted,
            "commit": list(t["candidates"][:accepted]) + [t["next"]],
        })
    return {
        "format": FORMAT,
        "window": window,
        "method": result.method,
        "label": label or result.method,
        "request_id": result.request_id,
        "source": result.source,
        "budget": result.budget,
        "language": result.language,
        "tokens": list(result.tokens),
        "decode_s": result.decode_s,
        "prepare_s": result.prepare_s,
        "start": result.start,
        "timestamps": list(result.timestamp_ids) if result.timestamp_ids else None,
        "published": published,
        "calls": calls,
        "spans": [{"kind": e.kind, "t0": rel(e.start), "t1": rel(e.end), "tokens": e.tokens, "width": e.width}
                  for e in sorted(events, key=lambda e: e.start)],
    }
