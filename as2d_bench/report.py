"""``report.md`` with the summary tables and two pictures (Figure 5 and Figure 6 of the paper)."""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from statistics import mean, median

from as2d_core.decode.events import DRAFT_KINDS, TARGET_KINDS
from as2d_core.decode.methods import registered
from .summary import SD_PARTS, split_label, window_tps


def _fixed_width(label: str) -> bool:
    """An sd-k* run, whose mean the report shows as ``sd``."""
    return split_label(label)[0] in SD_PARTS


def _methods_section(labels: list[str]) -> list[str]:
    """What each registered method that ran does, in a line (the registry's descriptions)."""
    known = registered()
    described = [m for m in dict.fromkeys(split_label(label)[0] for label in labels) if m in known]
    lines = [f"- `{m}`: {known[m].description}" for m in described if known[m].description]
    return ["## Methods", "", *lines, ""] if lines else []


def _fmt(value, digits=2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _nothing_ran(summary: dict) -> bool:
    """Every window failed (e.g. a serial method on a source that cannot extend a prefix)."""
    return not summary.get("windows") and bool(summary.get("failed_windows"))


def _summary_table(methods: dict) -> list[str]:
    """One row per method with its drafter beside it; the user's clock (e2e) first, the decode clock after."""
    lines = ["| method | drafter | e2e TPS | x target-only (e2e) | slower (e2e) | decode TPS | x target-only (decode) "
             "| slower (decode) | windows | exact | acceptance | coverage | first publish (s, median) "
             "| all published (s, median) | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in methods.items():
        if _nothing_ran(s):
            continue  # listed under "Methods that could not run"
        lines.append(
            f"| {name} | {_fmt(s.get('source'))} | {_fmt(s.get('pooled_e2e_tps'))} "
            f"| {_fmt(s.get('e2e_ratio_vs_target_only'))} | {_fmt(s.get('e2e_slower_windows'))} "
            f"| {_fmt(s.get('pooled_tps'))} | {_fmt(s.get('ratio_vs_target_only'))} | {s.get('slower_windows')} "
            f"| {s.get('windows')} | {s.get('exact_windows')} | {_fmt(s.get('acceptance'))} "
            f"| {_fmt(s.get('coverage'))} | {_fmt(s.get('median_first_publish_s'), 3)} "
            f"| {_fmt(s.get('median_all_published_s'), 3)} | {s.get('failed_windows', 0)} |")
    return lines


def _eligible_section(summary: dict) -> list[str]:
    eligible = summary.get("eligible")
    if not eligible:
        return []
    return [f"## Summary, eligible windows ({len(eligible['windows'])}: the languages every source drafts)", "",
            *_summary_table(eligible["methods"]), ""]


def _decomposition_table(rows: list[dict]) -> list[str]:
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ok: dict[str, bool] = defaultdict(lambda: True)
    for r in rows:
        d = r.get("decomposition")
        if not d:
            continue
        for k, v in d.items():
            sums[r["method"]][k] += v
        ok[r["method"]] &= bool(r.get("decomposition_ok"))
    lines = ["| method | T (s) | D | V | O | H | T = D+V-O+H on every window |", "|---|---|---|---|---|---|---|"]
    for name, s in sums.items():
        lines.append(f"| {name} | {s['T']:.3f} | {s['D']:.3f} | {s['V']:.3f} | {s['O']:.3f} | {s['H']:.3f} "
                     f"| {'yes' if ok[name] else 'NO'} |")
    return lines


def _words_section(methods: dict) -> list[str]:
    """What timing words cost each method (``--word-timestamps``): one aligner pass over the committed tokens,
    after the final token, so it is off the e2e clock and the same work for every method with the same tokens."""
    timed = {name: s for name, s in methods.items() if s.get("words_s") is not None}
    if not timed:
        return []
    lines = ["## Word timestamps", "",
             "The aligner pass after decoding (not in e2e): equal tokens, equal work for every method.", "",
             "| method | words (s, summed) | per window (s, mean) | share of e2e + words |", "|---|---|---|---|"]
    for name, s in timed.items():
        e2e = s.get("e2e_s")
        share = s["words_s"] / (e2e + s["words_s"]) if e2e else None
        lines.append(f"| {name} | {_fmt(s['words_s'], 3)} | {_fmt(s['words_s'] / s['windows'], 3)} "
                     f"| {_fmt(share, 3)} |")
    return [*lines, ""]


def _window_table(rows: list[dict], methods: list[str]) -> list[str]:
    tps = window_tps(rows, "e2e")
    windows = list(dict.fromkeys(r["window"] for r in rows))
    lines = ["| window | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for w in windows:
        lines.append(f"| {w} | " + " | ".join(_fmt(tps.get(m, {}).get(w)) for m in methods) + " |")
    return lines


@contextmanager
def saved_figure(path: Path, figsize: tuple[float, float]):
    """Axes of a headless (Agg) figure that is laid out, written to ``path`` and closed on exit.

    The one place for the backend, resolution and clean-up of every picture the bench and the
    tuning commands draw; the figure is closed even when drawing fails.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield ax
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


def plot_tps_distribution(rows: list[dict], path: Path) -> None:
    """Per-window TPS as an empirical CDF per method, unsmoothed (like Figure 5)."""
    with saved_figure(path, (7, 4.2)) as ax:
        for name, values in window_tps(rows).items():
            if _fixed_width(name):
                continue  # the sd curve is their per-window mean
            xs = sorted(values.values())
            if xs:
                ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=name)
        ax.set_xlabel("tokens per second (decode clock)")
        ax.set_ylabel("fraction of windows")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)


def pick_timeline_window(rows: list[dict]) -> str | None:
    """The as2d window with the median token count among those that verified drafts."""
    candidates = sorted((r["tokens"], r["window"]) for r in rows
                        if r["method"] == "as2d" and not r.get("error") and r.get("verify_calls"))
    return candidates[len(candidates) // 2][1] if candidates else None


def plot_timeline(traces: dict, window: str, methods: list[str], path: Path) -> None:
    """Drafter and target spans of one window, one pair of lanes per method (like Figure 6)."""
    methods = [m for m in methods if (window, m) in traces]
    with saved_figure(path, (10, 0.6 + 0.7 * max(1, 2 * len(methods)))) as ax:
        labels = []
        for i, m in enumerate(methods):
            spans = traces[(window, m)]["spans"]
            for lane, kinds, colour in ((2 * i, DRAFT_KINDS, "tab:orange"), (2 * i + 1, TARGET_KINDS, "tab:blue")):
                bars = [(s["t0"], s["t1"] - s["t0"]) for s in spans if s["kind"] in kinds and s["t1"] > s["t0"]]
                ax.broken_barh(bars, (lane - 0.35, 0.7), color=colour)
            labels += [f"{m} drafter", f"{m} target"]
        ax.set_yticks(range(len(labels)), labels)
        ax.invert_yaxis()
        ax.set_xlabel(f"seconds from the request (window {window})")


def _rounds_line(rows: list[dict]) -> list[str]:
    """Say so when every window ran several rounds and each row is its method's median round."""
    rounds = {len(r["e2e_s_rounds"]) for r in rows if r.get("e2e_s_rounds")}
    if not rounds:
        return []
    return [f"Each window ran every method {' or '.join(map(str, sorted(rounds)))} times, interleaved; each row is "
            "the round of median e2e time (`e2e_s_rounds` in results.jsonl holds them all)."]


def write_report(out_dir: Path, rows: list[dict], summary: dict, traces: dict) -> Path:
    ran = [m for m, s in summary["methods"].items() if not _nothing_ran(s)]
    methods = [m for m in ran if not _fixed_width(m)] + [m for m in ran if _fixed_width(m)]
    lines = ["# as2d bench report", "",
             f"{len(summary.get('windows', []))} windows. Two clocks: e2e TPS, the headline, is committed tokens over "
             "the user's clock, arrival to final token (audio in memory, models loaded: both encoders, language "
             "detection and prefill on it); decode TPS is committed tokens over the post-prefill decode clock (the "
             "paper's). `drafter`: the source each method drafted with.",
             "`sd` is the mean of the fixed-K TPS values (pooled per K, then averaged; per window for the CDF and "
             "slowdown counts). `exact`: tokens equal to target-only greedy decoding.",
             "A method run with a later source is named `METHOD@SOURCE`. First publish / all published: seconds "
             "from the start of the decode clock to the first non-empty published batch / the final one "
             "(serial methods: the end of the first / last proposing drafting round).", *_rounds_line(rows), "",
             "## Summary, all windows", "", *_summary_table(summary["methods"]), "", *_methods_section(ran),
             *_eligible_section(summary), *_words_section(summary["methods"]),
             "## Time decomposition (Appendix D.2.7), all windows summed", "", *_decomposition_table(rows), ""]
    try:
        plot_tps_distribution(rows, out_dir / "tps_distribution.png")
        lines += ["## Per-window decode TPS distribution", "", "![per-window decode TPS](tps_distribution.png)", ""]
        window = pick_timeline_window(rows)
        if window is not None:
            shown = [m for m, method in registered().items() if method.timeline and (window, m) in traces]
            plot_timeline(traces, window, shown, out_dir / "timeline.png")
            lines += [f"## Timeline of window {window}", "",
                      "Orange: drafter spans (drafting, catch-up, conversion). Blue: target calls.", "",
                      "![timeline](timeline.png)", ""]
    except ImportError as exc:
        lines += [f"(pictures not drawn: {exc}; `pip install matplotlib`)", ""]
    notes = sorted({f"{r['method']}: {r['error']}" for r in rows if r.get("error")})
    mismatches = [f"{r['window']} {r['method']}" for r in rows if r.get("exact") is False]
    lines += ["## Per-window e2e TPS", "", *_window_table(rows, methods), ""]
    if mismatches:
        lines += ["## Outputs that differ from target-only", "", *[f"- {m}" for m in mismatches], ""]
    if notes:
        lines += ["## Methods that could not run", "", *[f"- {n}" for n in notes[:50]], ""]
    tps = [r["tps"] for r in rows if r["method"] == "target-only" and not r.get("error")]
    if tps:
        lines += [f"Target-only per-window decode TPS: median {median(tps):.2f}, mean {mean(tps):.2f}.", ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines))
    return path
