"""The arithmetic of ``summary.json`` from the rows of ``results.jsonl``.

Pooled TPS is all committed tokens over all decode time. ``sd`` follows the
paper (D.1.3): pool each fixed K = 5..8 on its own, then average the four
TPS values; per window (for slowdown counts) average the four TPS values.
Rows with an ``error`` did not run and count in no statistic but ``failed_windows``.

Two clocks: ``pooled_e2e_tps``, the headline, over each row's ``e2e_s``: the user's clock, arrival to final
token with model loading off the clock (both encoders, language detection and prompt prefill on it); and
``pooled_tps`` over the post-prefill decode clock (the paper's); each with its ratio against target-only.
``eligible`` repeats the methods' statistics over the windows every source drafts (see :func:`eligible_windows`).

Methods are keyed by their bench label: ``as2d`` for the first source,
``as2d@NAME`` for another (see ``runner``); ``sd@NAME`` pools ``sd-k5@NAME``..
``sd-k8@NAME``. Each entry also names its ``method`` and ``source``, and gives
``median_first_publish_s`` / ``median_all_published_s``: the medians of the
rows' non-null ``first_publish_s`` / ``all_published_s`` (null if none).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import mean, median

from as2d_core.decode.methods import SD_METHODS

SD_PARTS = tuple(method.name for method in SD_METHODS)  # sd-k5..sd-k8, whose mean the bench reports as ``sd``
SD = "sd"  # the bench's alias for its four fixed widths (SD_PARTS), reported as their mean (D.4)
REFERENCE = "target-only"
TIE = 1e-9  # relative TPS difference treated as a numerical tie, not a slowdown
LABEL_SEP = "@"


def split_label(label: str) -> tuple[str, str]:
    """``sd-k5@pocketsphinx`` -> (``sd-k5``, ``@pocketsphinx``); a plain name has an empty suffix."""
    method, sep, source = label.partition(LABEL_SEP)
    return method, sep + source


def sd_suffixes(labels: Iterable[str]) -> list[str]:
    """The source suffixes for which all four fixed-K parts are present, in the order the labels name them.

    Shared by the summary and the bench's derived ``sd`` rows; the order follows the input (not a set's
    hash order), so ``summary.json`` lists ``sd@SOURCE`` entries the same way on every run.
    """
    labels = list(labels)
    present = set(labels)
    suffixes = dict.fromkeys(split_label(m)[1] for m in labels if split_label(m)[0] in SD_PARTS)
    return [s for s in suffixes if all(p + s in present for p in SD_PARTS)]


def _median(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return median(values) if values else None


def _ok(row: dict) -> bool:
    return not row.get("error") and not row.get("derived")


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def e2e_seconds(row: dict) -> float | None:
    """Arrival to final token: the row's ``e2e_s``, or (older rows) its preparation plus decode clock."""
    if row.get("e2e_s") is not None:
        return row["e2e_s"]
    if row.get("prepare_s") is not None:
        return row["prepare_s"] + row["decode_s"]
    return None


def not_served(row: dict) -> bool:
    """A row whose source does not draft the window's language (the engine ran it target-only)."""
    if row.get("served") is not None:
        return row["served"] is False
    return "does not draft" in (row.get("note") or "")  # rows written before ``served`` existed


def eligible_windows(rows: Iterable[dict]) -> list[str]:
    """The windows every source of the run drafts (none of their rows ran target-only for want of the language)."""
    rows = list(rows)
    excluded = {r["window"] for r in rows if not_served(r)}
    return [w for w in dict.fromkeys(r["window"] for r in rows) if w not in excluded]


def _pooled(rows: list[dict]) -> dict:
    tokens = sum(r["tokens"] for r in rows)
    seconds = sum(r["decode_s"] for r in rows)
    proposed = sum(r.get("proposed") or 0 for r in rows)
    accepted = sum(r.get("accepted") or 0 for r in rows)
    timed = [(r["tokens"], e2e_seconds(r)) for r in rows]
    timed = [(n, t) for n, t in timed if t is not None]
    end_to_end = sum(t for _, t in timed)
    return {
        "pooled_tps": _ratio(tokens, seconds) or 0.0,
        # end to end: both models' audio encoding and prompt prefill on the clock too (rows that report it)
        "pooled_e2e_tps": _ratio(sum(n for n, _ in timed), end_to_end),
        "tokens": tokens,
        "decode_s": seconds,
        "e2e_s": end_to_end if timed else None,
        "windows": len(rows),
        "exact_windows": sum(1 for r in rows if r.get("exact") is True),
        "acceptance": _ratio(accepted, proposed),
        "coverage": _ratio(accepted, tokens),
        "proposed": proposed,
        "accepted": accepted,
        "median_first_publish_s": _median(r.get("first_publish_s") for r in rows),
        "median_all_published_s": _median(r.get("all_published_s") for r in rows),
        # --word-timestamps: the aligner pass after decoding, summed (off the e2e clock; equal tokens, equal work)
        "words_s": sum(r["words_s"] for r in rows) if rows and all("words_s" in r for r in rows) else None,
    }


def e2e_tps(row: dict) -> float | None:
    seconds = e2e_seconds(row)
    return row["tokens"] / seconds if seconds else None


def window_tps(rows: Iterable[dict], clock: str = "decode") -> dict[str, dict[str, float]]:
    """Per method, per window TPS on the ``decode`` or ``e2e`` clock; ``sd`` is the mean of the four fixed-K TPS."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        value = r.get("tps") if clock == "decode" else e2e_tps(r)
        if _ok(r) and value is not None:
            out[r["method"]][r["window"]] = value
    for suffix in sd_suffixes(out):
        parts = [out[m + suffix] for m in SD_PARTS]
        common = set.intersection(*(set(p) for p in parts))
        out["sd" + suffix] = {w: mean(p[w] for p in parts) for w in sorted(common)}
    return dict(out)


def summarize(rows: list[dict]) -> dict:
    """Every method's statistics over all windows, and again over the ``eligible`` windows only.

    ``eligible``: the windows whose language the run's sources draft, so as2d actually drafted there;
    over all windows the others dilute every speculative method towards target-only.
    """
    summary = {"methods": _methods(rows), "reference": REFERENCE}
    windows = eligible_windows(rows)
    keep = set(windows)
    summary["eligible"] = {"windows": windows, "methods": _methods([r for r in rows if r["window"] in keep])}
    return summary


def _methods(rows: list[dict]) -> dict:
    by_method: dict[str, list[dict]] = defaultdict(list)
    failed: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.get("derived"):
            continue
        if r.get("error"):
            failed[r["method"]] += 1
        else:
            by_method[r["method"]].append(r)
    methods = {name: _pooled(group) for name, group in by_method.items()}
    for suffix in sd_suffixes(methods):
        names = [m + suffix for m in SD_PARTS]
        parts = [methods[m] for m in names]
        exact_sets = [{r["window"] for r in by_method[m] if r.get("exact") is True} for m in names]
        window_sets = [{r["window"] for r in by_method[m]} for m in names]
        pooled_rows = [r for m in names for r in by_method[m]]

        def _mean(key):
            values = [p[key] for p in parts]
            return None if any(v is None for v in values) else mean(values)

        methods["sd" + suffix] = {
            "pooled_tps": mean(p["pooled_tps"] for p in parts),
            "pooled_e2e_tps": _mean("pooled_e2e_tps"),
            "windows": len(set.intersection(*window_sets)),
            "exact_windows": len(set.intersection(*exact_sets)),
            "acceptance": _mean("acceptance"),
            "coverage": _mean("coverage"),
            "median_first_publish_s": _median(r.get("first_publish_s") for r in pooled_rows),
            "median_all_published_s": _median(r.get("all_published_s") for r in pooled_rows),
            "of": names,
        }
    sources = {}
    for r in rows:
        if r.get("source") is not None:
            sources.setdefault(r["method"], r["source"])
    per_window = window_tps(rows)
    per_window_e2e = window_tps(rows, "e2e")
    reference = per_window.get(REFERENCE, {})
    reference_e2e = per_window_e2e.get(REFERENCE, {})
    base = methods.get(REFERENCE, {}).get("pooled_tps")
    base_e2e = methods.get(REFERENCE, {}).get("pooled_e2e_tps")
    for name, stats in methods.items():
        tps = per_window.get(name, {})
        compared = [w for w in tps if w in reference]
        stats["slower_windows"] = sum(1 for w in compared if tps[w] < reference[w] * (1 - TIE))
        stats["compared_windows"] = len(compared)
        tps_e2e = per_window_e2e.get(name, {})
        stats["e2e_slower_windows"] = sum(1 for w in tps_e2e if w in reference_e2e
                                          and tps_e2e[w] < reference_e2e[w] * (1 - TIE))
        stats["ratio_vs_target_only"] = _ratio(stats["pooled_tps"], base) if base else None
        e2e = stats.get("pooled_e2e_tps")
        stats["e2e_ratio_vs_target_only"] = _ratio(e2e, base_e2e) if base_e2e and e2e is not None else None
        stats["failed_windows"] = failed.get(name, 0)
    for name, count in failed.items():
        methods.setdefault(name, {"pooled_tps": None, "pooled_e2e_tps": None, "e2e_ratio_vs_target_only": None,
                                  "windows": 0, "exact_windows": 0, "slower_windows": 0,
                                  "acceptance": None, "coverage": None, "ratio_vs_target_only": None,
                                  "median_first_publish_s": None, "median_all_published_s": None,
                                  "failed_windows": count})
    for name, stats in methods.items():
        method, suffix = split_label(name)
        stats["method"] = method
        stats["source"] = sources.get(name, sources.get(SD_PARTS[0] + suffix) if method == "sd" else None)
    return methods
