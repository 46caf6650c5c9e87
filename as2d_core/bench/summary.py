"""The arithmetic of ``summary.json`` from the rows of ``results.jsonl``.

Pooled TPS is all committed tokens over all decode time. ``sd`` follows the
paper (D.1.3): pool each fixed K = 5..8 on its own, then average the four
TPS values; per window (for slowdown counts) average the four TPS values.
Rows with an ``error`` did not run and count in no statistic but ``failed_windows``.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import mean

SD_PARTS = ("sd-k5", "sd-k6", "sd-k7", "sd-k8")
REFERENCE = "target-only"
TIE = 1e-9  # relative TPS difference treated as a numerical tie, not a slowdown


def _ok(row: dict) -> bool:
    return not row.get("error") and not row.get("derived")


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def _pooled(rows: list[dict]) -> dict:
    tokens = sum(r["tokens"] for r in rows)
    seconds = sum(r["decode_s"] for r in rows)
    proposed = sum(r.get("proposed") or 0 for r in rows)
    accepted = sum(r.get("accepted") or 0 for r in rows)
    return {
        "pooled_tps": _ratio(tokens, seconds) or 0.0,
        "tokens": tokens,
        "decode_s": seconds,
        "windows": len(rows),
        "exact_windows": sum(1 for r in rows if r.get("exact") is True),
        "acceptance": _ratio(accepted, proposed),
        "coverage": _ratio(accepted, tokens),
        "proposed": proposed,
        "accepted": accepted,
    }


def window_tps(rows: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Per method, per window TPS; ``sd`` is the mean of the four fixed-K TPS of that window."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        if _ok(r):
            out[r["method"]][r["window"]] = r["tps"]
    parts = [out[m] for m in SD_PARTS if m in out]
    if len(parts) == len(SD_PARTS):
        common = set.intersection(*(set(p) for p in parts))
        out["sd"] = {w: mean(p[w] for p in parts) for w in sorted(common)}
    return dict(out)


def summarize(rows: list[dict]) -> dict:
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
    if all(m in methods for m in SD_PARTS):
        parts = [methods[m] for m in SD_PARTS]
        exact_sets = [{r["window"] for r in by_method[m] if r.get("exact") is True} for m in SD_PARTS]
        window_sets = [{r["window"] for r in by_method[m]} for m in SD_PARTS]

        def _mean(key):
            values = [p[key] for p in parts]
            return None if any(v is None for v in values) else mean(values)

        methods["sd"] = {
            "pooled_tps": mean(p["pooled_tps"] for p in parts),
            "windows": len(set.intersection(*window_sets)),
            "exact_windows": len(set.intersection(*exact_sets)),
            "acceptance": _mean("acceptance"),
            "coverage": _mean("coverage"),
            "of": list(SD_PARTS),
        }
    per_window = window_tps(rows)
    reference = per_window.get(REFERENCE, {})
    base = methods.get(REFERENCE, {}).get("pooled_tps")
    for name, stats in methods.items():
        tps = per_window.get(name, {})
        compared = [w for w in tps if w in reference]
        stats["slower_windows"] = sum(1 for w in compared if tps[w] < reference[w] * (1 - TIE))
        stats["compared_windows"] = len(compared)
        stats["ratio_vs_target_only"] = _ratio(stats["pooled_tps"], base) if base else None
        stats["failed_windows"] = failed.get(name, 0)
    for name, count in failed.items():
        methods.setdefault(name, {"pooled_tps": None, "windows": 0, "exact_windows": 0, "slower_windows": 0,
                                  "acceptance": None, "coverage": None, "ratio_vs_target_only": None,
                                  "failed_windows": count})
    return {"methods": methods, "reference": REFERENCE}
