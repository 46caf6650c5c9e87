"""Offline source/budget selection by replay (Section 4.3, Appendix D.2.6, D.4.3).

Trajectories are collected natively once per source (the drafter never reads
the target, so one as2d run per window and source holds everything every
budget needs); every feasible (source, budget) pair is then priced by replay.
The pair with the best pooled throughput on the development windows is kept,
fixed, for deployment. On the test windows we report that pair's pooled TPS,
the per-window hindsight oracle (the fastest pair on each window, zero
selection cost) and the gap 100(1 - TPS_selected / TPS_oracle).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from as2d_core.engine import DecodeOptions
from .costs import Costs
from .replay import DECOUPLED, Record, record_of, replay_record
from .tasks import local_map


@attrs.frozen
class Pair:
    source: str
    budget: int


def records_by_source(traces: Sequence[dict], sources: Sequence[str]) -> dict[str, dict[str, Record]]:
    """{source: {window: record}} from as2d traces; a window the source cannot draft (the engine ran it
    target-only, ``source`` null) counts for every source as that fallback."""
    out: dict[str, dict[str, Record]] = {s: {} for s in sources}
    fallback: dict[str, Record] = {}
    for trace in traces:
        if trace.get("method") != "as2d":
            continue
        record = record_of(trace)
        if record.source is None:
            fallback[record.window] = record
        elif record.source in out:
            out[record.source][record.window] = record
    for per in out.values():
        for window, record in fallback.items():
            per.setdefault(window, record)
    return out


def price_cells(per: dict[str, Record], costs: Costs, budget: int, windows: Sequence[str], align_window: int = 8
                ) -> dict[str, tuple[int, float]]:
    """{window: (tokens, seconds)} of one source at one budget: one job of the grid."""
    cells = {}
    for w in windows:
        out = replay_record(per[w], costs, budget, align_window)
        cells[w] = (len(out.tokens), out.decode_s)
    return cells


def price_grid(records: dict[str, dict[str, Record]], costs: Costs, budgets: Sequence[int], windows: Sequence[str],
               align_window: int = 8, mapper: Callable = local_map) -> dict[Pair, dict[str, tuple[int, float]]]:
    """{pair: {window: (tokens, seconds)}} for every feasible pair that has a record of every window.

    Each pair is an independent job; ``mapper`` runs them (here, or as Ray tasks: ``tasks.ray_map``).
    """
    pairs = [Pair(source, budget) for source, per in records.items() if all(w in per for w in windows)
             for budget in budgets if costs.feasible_budget(budget)]
    subsets = {s: {w: records[s][w] for w in windows} for s in {p.source for p in pairs}}
    jobs = [(subsets[p.source], costs, p.budget, list(windows), align_window) for p in pairs]
    return dict(zip(pairs, mapper(price_cells, jobs)))


def target_only_cells(records: dict[str, dict[str, Record]], costs: Costs, windows: Sequence[str]
                      ) -> dict[str, tuple[int, float]]:
    """The same windows decoded by the target alone (the reference line of the budget plot)."""
    from .replay import simulate

    per = next(iter(records.values()), {})
    cells = {}
    for w in windows:
        if w in per:
            out = simulate(per[w], costs, None)
            cells[w] = (len(out.tokens), out.decode_s)
    return cells


def pooled(cells: dict[str, tuple[int, float]]) -> float:
    tokens = sum(n for n, _ in cells.values())
    seconds = sum(s for _, s in cells.values())
    return tokens / seconds if seconds > 0 else 0.0


def choose(grid: dict[Pair, dict[str, tuple[int, float]]]) -> tuple[Pair, float]:
    """The pair with the highest pooled TPS (ties: smaller budget, then source name)."""
    if not grid:
        raise ValueError("no feasible source/budget pair: the profile lacks their widths or the traces lack windows")
    best = max(grid, key=lambda p: (pooled(grid[p]), -p.budget, p.source))
    return best, pooled(grid[best])


def oracle(grid: dict[Pair, dict[str, tuple[int, float]]]) -> tuple[float, dict[str, Pair]]:
    """Per window the fastest pair (hindsight, zero selection cost); pooled tokens over pooled time."""
    windows = next(iter(grid.values())).keys()
    picks = {w: min(grid, key=lambda p: (grid[p][w][1], p.budget, p.source)) for w in windows}
    tokens = sum(grid[picks[w]][w][0] for w in windows)
    seconds = sum(grid[picks[w]][w][1] for w in windows)
    return (tokens / seconds if seconds > 0 else 0.0), picks


def gap_pct(selected: float, oracle_tps: float) -> float:
    """Appendix D.4.3: 100 (1 - TPS_selected / TPS_oracle)."""
    return 100 * (1 - selected / oracle_tps) if oracle_tps > 0 else 0.0


def collect(manifest: Path, target, sources: dict, options, out_dir: Path, progress: bool = True) -> list[dict]:
    """Native as2d trajectories of every window for every source (and target-only once), via ``as2d bench``."""
    from as2d_bench.runner import Bench, read_manifest
    from .replay import read_traces

    windows = read_manifest(manifest)
    traces = []
    for i, (name, source) in enumerate(sources.items()):
        methods = ["target-only", "as2d"] if i == 0 else ["as2d"]
        folder = out_dir / f"traces-{name}"
        Bench(target, source, options, methods, folder, save_traces=True, progress=progress).run(windows)
        traces.extend(read_traces([folder]))
    return traces


def config_text(base, pair: Pair, note: str) -> str:
    """A task configuration (TOML) for the selected pair, keeping the rest of ``base`` (a Config)."""
    t, s = base.target, base.source
    lines = [f"# {note}", f'task = "{base.task}"']
    if base.language:
        lines.append(f'language = "{base.language}"')
    lines += [f"budget = {pair.budget}", f"align_window = {base.align_window}",
              f'on_missing_device = "{base.on_missing_device}"', "", "[target]", f'model = "{t.model}"']
    if t.backend:
        lines.append(f'backend = "{t.backend}"')
    lines += [f'device = "{t.device}"', f"threads = {t.threads}", f"shared_threads = {t.shared_threads}", "",
              "[source]", f'name = "{pair.source}"']
    if s is not None and s.name == pair.source and s.backend:
        lines.append(f'backend = "{s.backend}"')
    lines += [f'device = "{s.device if s else "cpu"}"', f"threads = {s.threads if s else 1}",
              f"publication_size = {s.publication_size if s else DecodeOptions().publication_size}"]
    if base.device_profile:
        lines += ["", "[device_profile]", f'name = "{base.device_profile["name"]}"']
        if base.device_profile.get("description"):
            lines.append(f'description = "{base.device_profile["description"]}"')
    return "\n".join(lines) + "\n"


def plot_budgets(grid: dict[Pair, dict[str, tuple[int, float]]], selected: Pair, path: Path,
                 target_only_tps: float | None = None) -> None:
    """Pooled development TPS against budget, one line per source; the selected pair marked."""
    from as2d_bench.report import saved_figure

    with saved_figure(path, (7, 3.5)) as ax:
        for source in sorted({p.source for p in grid}):
            pairs = sorted((p for p in grid if p.source == source), key=lambda p: p.budget)
            ax.plot([p.budget for p in pairs], [pooled(grid[p]) for p in pairs], marker="o", ms=3, label=source)
        ax.plot([selected.budget], [pooled(grid[selected])], marker="*", ms=14, color="black", ls="none",
                label=f"selected: {selected.source} b={selected.budget}")
        if target_only_tps:
            ax.axhline(target_only_tps, color="gray", ls="--", lw=1, label="target-only")
        ax.set_xlabel("proposal budget b (physical width <= b+1)")
        ax.set_ylabel("pooled TPS (replay, dev)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)


__all__ = ["DECOUPLED", "Pair", "choose", "collect", "config_text", "gap_pct", "oracle", "plot_budgets",
           "price_cells", "price_grid", "records_by_source", "target_only_cells"]
