"""One ``results.jsonl`` row per window and method: what a decode, a failure or the SD mean of a window records."""
from __future__ import annotations

from statistics import mean
from typing import TYPE_CHECKING

from as2d_core.decode.result import DecodeResult

from .summary import SD, SD_PARTS, sd_suffixes

if TYPE_CHECKING:
    from .runner import ManifestRow


def publish_times(result: DecodeResult) -> tuple[float | None, float | None]:
    """(first non-empty publication, final publication) in seconds from the start of the decode clock."""
    t0 = result.clock[0]
    if result.batches:  # decoupled drafting: the producer's batches
        first = next((b.published_at for b in result.batches if b.tokens), None)
        last = next((b.published_at for b in reversed(result.batches) if b.final), None)
    else:  # serial drafting: a round's candidates appear when its draft ends
        ends = [t["end"] for t in result.trace if t["kind"] == "draft" and t.get("candidates")]
        first, last = (ends[0], ends[-1]) if ends else (None, None)
    return tuple(None if t is None else max(0.0, t - t0) for t in (first, last))


def result_row(window: ManifestRow, method: str, result: DecodeResult, reference: DecodeResult | None,
               source: str | None = None) -> dict:
    """One ``results.jsonl`` row; ``method`` is the bench label and ``source`` the source it was run with."""
    d = result.decomposition
    first_publish_s, all_published_s = publish_times(result)
    row = {
        "window": window.id,
        "lang": result.language,
        "method": method,
        "tokens": len(result.tokens),
        "decode_s": result.decode_s,
        "tps": result.tps,
        "exact": (result.tokens == reference.tokens) if reference is not None else True,
        "proposed": result.proposed,
        "accepted": result.accepted,
        "verify_calls": result.verify_calls,
        "verify_widths": result.verify_widths,
        "target_only_steps": result.target_only_steps,
        "prepare_s": result.prepare_s,
        "e2e_s": result.e2e_s,
        "drain_s": result.drain_s,
        "first_publish_s": first_publish_s,
        "all_published_s": all_published_s,
        "source": source if source is not None else result.source,
        # run with a source, did it draft? (False: the window's language is one the source does not serve)
        "served": None if source is None else result.source is not None,
        "budget": result.budget,
        "note": result.note,
        "producer_error": result.producer_error,
        "text": result.text,
    }
    if result.words_s is not None:  # --word-timestamps: the aligner pass after decoding, off the e2e clock
        row["words_s"], row["words"] = result.words_s, len(result.words)
    if d is not None:
        row["decomposition"] = {"T": d.total, "D": d.drafting, "V": d.verification, "O": d.overlap, "H": d.residual}
        row["decomposition_ok"] = d.check()
    return row


def error_row(window: ManifestRow, method: str, message: str, source: str | None = None) -> dict:
    return {"window": window.id, "lang": window.lang, "method": method, "source": source, "tokens": 0,
            "decode_s": 0.0, "tps": 0.0, "exact": None, "error": message}


def sd_mean_rows(window: ManifestRow, rows: list[dict]) -> list[dict]:
    """The derived ``sd`` row(s) of one window, one per source: the mean TPS of its four fixed-K rows (D.4)."""
    out = []
    ran = [r for r in rows if not r.get("error")]
    for suffix in sd_suffixes(r["method"] for r in ran):  # all four fixed-K rows ran
        names = [p + suffix for p in SD_PARTS]
        parts = [r for r in ran if r["method"] in names]
        out.append({"window": window.id, "lang": parts[0]["lang"], "method": SD + suffix, "derived": True,
                    "of": names, "source": parts[0].get("source"), "tokens": parts[0]["tokens"],
                    "tps": mean(r["tps"] for r in parts), "exact": all(r["exact"] for r in parts)})
    return out


def median_round(runs: list[tuple[dict, dict | None]]) -> tuple[dict, dict | None]:
    """One method's rounds on one window as one row: the round of median ``e2e_s`` (the lower middle
    for an even count), with every round's ``e2e_s`` in ``e2e_s_rounds``.

    A single machine's timings of one window scatter by a tenth or more from run to run; the median
    round of several is what a per-window comparison can rest on. ``exact`` holds only if it held
    in every round, and a round that failed makes the row that round's error row: neither a
    mismatch nor a failure is hidden behind a good round.
    """
    failed = next(((row, trace) for row, trace in runs if row.get("error")), None)
    if failed is not None:
        return failed
    timed = sorted(runs, key=lambda run: run[0]["e2e_s"])
    row, trace = timed[(len(timed) - 1) // 2]
    verdicts = {r["exact"] for r, _ in runs}  # None: a peer run without a reference
    exact = verdicts.pop() if len(verdicts) == 1 else False
    return dict(row, e2e_s_rounds=[r["e2e_s"] for r, _ in runs], exact=exact), trace
