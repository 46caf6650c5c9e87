"""Replay against native runs: each window's costs calibrated on its own target-only run (D.3), and the
replay's error on both clocks (``mae``).
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from .costs import Costs
from .records import record_of
from .replay import CLOCKS, simulate


def calibration_key(trace: dict) -> tuple[str, str, int | None]:
    """The target-only run a trace is calibrated on: the same bench pass, window and round."""
    return trace.get("_file", ""), trace["window"], trace.get("round")


def load_factors(traces: Sequence[dict], costs: Costs) -> dict[tuple[str, str, int | None], tuple[float, float | None]]:
    """Per (file, window, round): native target-only decode time over its replay under ``costs``, and the same
    of its preparation (None when the profile has no preparation costs or the trace no preparation).

    On a machine whose load drifts (shared cores), this calibrates every cost of a window with
    the target-only run made just before it (bench runs methods back to back per window, round by
    round), as D.3 calibrates immediately before validation. The target-only rows are then exact
    by construction on both clocks; only the other methods measure the replay's error.
    """
    factors = {}
    for trace in traces:
        if trace.get("method") == "target-only" and trace.get("decode_s"):
            replayed = simulate(record_of(trace), costs, None)
            if replayed.decode_s > 0:
                prepare = trace.get("prepare_s")
                factors[calibration_key(trace)] = (
                    trace["decode_s"] / replayed.decode_s,
                    prepare / replayed.prepare_s if prepare and replayed.prepare_s else None)
    return factors


def mae(rows: list[dict], clock: str = "decode") -> dict:
    """Appendix D.3: signed error 100(TPS_replay/TPS_native - 1) per window, its mean magnitude, pooled error,
    on ``clock`` (``decode``: tokens over the decode clock; ``e2e``: over arrival to final token).

    Repeated native runs of one (window, method) count once, at their median TPS (as D.3 uses the
    median native latency), against the median of their replays.
    """
    native_key = "native_e2e_tps" if clock == "e2e" else "native_tps"
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get(native_key) and (clock != "e2e" or r.get("e2e_s")):
            groups.setdefault((r["window"], r["method"]), []).append(r)
    if not groups:
        return {"replay_mae_pct": None, "windows": 0}

    def tps(r: dict) -> float:
        return r["tokens"] / r["e2e_s"] if clock == "e2e" else r["tps"]

    errors, tokens, native_s, replay_s = [], 0, 0.0, 0.0
    for group in groups.values():
        native = statistics.median(r[native_key] for r in group)
        replay = statistics.median(tps(r) for r in group)
        errors.append(100 * (replay / native - 1))
        n = group[0]["tokens"]
        tokens, native_s, replay_s = tokens + n, native_s + n / native, replay_s + n / replay
    return {"replay_mae_pct": sum(abs(e) for e in errors) / len(errors), "windows": len(errors),
            "repeats": max(len(g) for g in groups.values()), "signed_mean_pct": sum(errors) / len(errors),
            "pooled_error_pct": 100 * (native_s / replay_s - 1), "max_abs_pct": max(abs(e) for e in errors)}


def add_native_comparison(summary: dict, rows: list[dict]) -> None:
    """Add to a replay's ``summary`` how each window and method compares with its native runs, on both clocks,
    and the headline replay error (D.3) over the as2d runs."""
    by_method: dict[str, list[dict]] = {}
    runs: dict[str, list[dict]] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
        if r.get("native_tps"):
            runs.setdefault(f"{r['window']}/{r['method']}", []).append(r)

    def median_of(rs, key):
        values = [r[key] for r in rs if r.get(key) is not None]
        return statistics.median(values) if values else None

    summary["native"] = {
        "windows": {key: {"native_tps": median_of(rs, "native_tps"), "replay_tps": median_of(rs, "tps"),
                          "native_e2e_tps": median_of(rs, "native_e2e_tps"),
                          "replay_e2e_tps": median_of([dict(r, e2e_tps=r["tokens"] / r["e2e_s"]) for r in rs
                                                       if r.get("e2e_s")], "e2e_tps"), "runs": len(rs)}
                    for key, rs in runs.items()},
        "methods": {m: {clock: mae(rs, clock) for clock in CLOCKS} for m, rs in by_method.items()},
    }
    # The headline (D.3) compares replay with native decoupled runs; calibrated target-only rows are exact.
    decoupled = [r for r in rows if r["method"].startswith("as2d")]
    summary["replay_mae_scope"] = "as2d runs" if decoupled else "all runs"
    summary["replay_mae_pct"] = mae(decoupled or rows, "decode")["replay_mae_pct"]
    summary["replay_e2e_mae_pct"] = mae(decoupled or rows, "e2e")["replay_mae_pct"]
    for name, stats in summary["methods"].items():
        errors = summary["native"]["methods"].get(name, {})
        stats["replay_mae_pct"] = errors.get("decode", {}).get("replay_mae_pct")
        stats["replay_e2e_mae_pct"] = errors.get("e2e", {}).get("replay_mae_pct")
