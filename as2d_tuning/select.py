"""Offline selection of source, budget, drafter niceness and start by replay (Section 4.3, Appendix D.2.6, D.4.3).

Trajectories are collected natively once per source (the drafter never reads
the target, so one as2d run per window and source holds everything every
budget, niceness and start needs); every feasible choice is then priced by
replay, on the user's clock (arrival to final token) by default or on the
paper's decode clock. The choice with the best pooled throughput on the
development windows is kept, fixed, for deployment. On the test windows we
report that choice's pooled TPS, the per-window hindsight oracle (the fastest
choice on each window, zero selection cost) and the gap
100(1 - TPS_selected / TPS_oracle).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from as2d_core.decode.options import DEFAULTS
from as2d_core.setup.source_spec import SourceSpec
from .costs import Costs, MissingCost
from .records import Record, record_of
from .replay import replay_record
from .tasks import local_map


@attrs.frozen
class Pair:
    """One choice of the catalog; ``niceness`` and ``start`` None: as traced."""

    source: str
    budget: int
    niceness: int | None = None
    start: str | None = None

    def key(self) -> tuple:
        """Ties go to the smaller budget, the lower niceness, arrival, then the source's name."""
        return self.budget, self.niceness or 0, self.start != "arrival", self.source


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


def missing_windows(records: dict[str, dict[str, Record]], windows: Sequence[str]) -> dict[str, list[str]]:
    """{source: windows it has no record of}, for the sources that lack any."""
    out = {s: [w for w in windows if w not in per] for s, per in records.items()}
    return {s: ws for s, ws in out.items() if ws}


def price_cells(per: dict[str, Record], costs: Costs, budget: int, windows: Sequence[str],
                align_window: int = DEFAULTS.align_window, niceness: int | None = None, start: str | None = None,
                clock: str = "e2e") -> dict[str, tuple[int, float]]:
    """{window: (tokens, seconds on ``clock``)} of one source at one budget, niceness and start: one job of the grid."""
    cells = {}
    for w in windows:
        out = replay_record(per[w], costs, budget, align_window, niceness=niceness, start=start)
        seconds = out.seconds(clock)
        if seconds is None:
            raise MissingCost(f"{w}: the profile has no preparation costs, so the user's clock is not priced")
        cells[w] = (len(out.tokens), seconds)
    return cells


def price_grid(records: dict[str, dict[str, Record]], costs: Costs, budgets: Sequence[int], windows: Sequence[str],
               align_window: int = DEFAULTS.align_window, mapper: Callable = local_map,
               niceness: Sequence[int | None] = (None,), starts: Sequence[str | None] = (None,),
               clock: str = "e2e") -> dict[Pair, dict[str, tuple[int, float]]]:
    """{choice: {window: (tokens, seconds)}} for every feasible choice that has a record of every window.

    Each choice is an independent job; ``mapper`` runs them (here, or as Ray tasks: ``tasks.ray_map``).
    """
    pairs = [Pair(source, budget, nice, start) for source, per in records.items() if all(w in per for w in windows)
             for budget in budgets for nice in niceness for start in starts
             if costs.feasible_budget(budget, source=source, niceness=nice)]
    subsets = {s: {w: records[s][w] for w in windows} for s in {p.source for p in pairs}}
    jobs = [(subsets[p.source], costs, p.budget, list(windows), align_window, p.niceness, p.start, clock)
            for p in pairs]
    return dict(zip(pairs, mapper(price_cells, jobs)))


def target_only_cells(records: dict[str, dict[str, Record]], costs: Costs, windows: Sequence[str],
                      clock: str = "e2e") -> dict[str, tuple[int, float]]:
    """The same windows decoded by the target alone (the reference line of the budget plot)."""
    from .replay import simulate

    per = next(iter(records.values()), {})
    cells = {}
    for w in windows:
        if w in per:
            out = simulate(per[w], costs, None)
            if out.seconds(clock) is not None:
                cells[w] = (len(out.tokens), out.seconds(clock))
    return cells


def pooled(cells: dict[str, tuple[int, float]]) -> float:
    tokens = sum(n for n, _ in cells.values())
    seconds = sum(s for _, s in cells.values())
    return tokens / seconds if seconds > 0 else 0.0


def choose(grid: dict[Pair, dict[str, tuple[int, float]]]) -> tuple[Pair, float]:
    """The pair with the highest pooled TPS (ties: smaller budget, then source name)."""
    if not grid:
        raise ValueError("no feasible source/budget choice: the profile lacks their widths or the traces lack windows")
    best = min(grid, key=lambda p: (-pooled(grid[p]), p.key()))
    return best, pooled(grid[best])


def oracle(grid: dict[Pair, dict[str, tuple[int, float]]]) -> tuple[float, dict[str, Pair]]:
    """Per window the fastest pair (hindsight, zero selection cost); pooled tokens over pooled time."""
    windows = next(iter(grid.values())).keys()
    picks = {w: min(grid, key=lambda p: (grid[p][w][1], p.key())) for w in windows}
    tokens = sum(grid[picks[w]][w][0] for w in windows)
    seconds = sum(grid[picks[w]][w][1] for w in windows)
    return (tokens / seconds if seconds > 0 else 0.0), picks


def gap_pct(selected: float, oracle_tps: float) -> float:
    """Appendix D.4.3: 100 (1 - TPS_selected / TPS_oracle)."""
    return 100 * (1 - selected / oracle_tps) if oracle_tps > 0 else 0.0


def collect(manifest: Path, target, sources: dict, options, out_dir: Path, progress: bool = True) -> list[dict]:
    """Native as2d trajectories of every window for every source (and target-only once), via ``as2d bench``."""
    from as2d_bench.runner import Bench, read_manifest
    from .records import read_traces

    windows = read_manifest(manifest)
    traces = []
    for i, (name, source) in enumerate(sources.items()):
        methods = ["target-only", "as2d"] if i == 0 else ["as2d"]
        folder = out_dir / f"traces-{name}"
        Bench(target, source, options, methods, folder, save_traces=True, progress=progress).run(windows)
        traces.extend(read_traces([folder]))
    return traces


def config_text(base, pair: Pair, note: str, guessed: bool = False, profile: Path | None = None) -> str:
    """A task configuration (TOML) for the selected choice, keeping the rest of ``base`` (a Config).

    The niceness goes to ``guess_nice`` when the development requests named no language (the drafter then
    starts on a guess), else to ``nice``. ``profile``: a device profile with batch costs, named so that the
    configuration's runs price their waves and its server the batch size up to which requests draft from it.
    """
    t, s, options, spec = base.target, base.source, base.decode, SourceSpec.parse(pair.source)
    lines = [f"# {note}", f'task = "{base.task}"']
    if base.language:
        lines.append(f'language = "{base.language}"')
    lines += [f"budget = {pair.budget}", f"align_window = {options.align_window}"]
    if pair.start is not None:
        lines.append(f'start = "{pair.start}"')
    if profile is not None:
        lines.append(f"profile = {json.dumps(str(profile))}  # its batch costs: waves and drafting beside others")
    lines += [f'on_missing_device = "{base.on_missing_device}"', "", "[target]", f'model = "{t.model}"']
    if t.backend:
        lines.append(f'backend = "{t.backend}"')
    lines += [f'device = "{t.device}"', f"threads = {options.target_threads}",
              f"shared_threads = {options.shared_target_threads}", "", "[source]", f'name = "{spec.name}"']
    if s is not None and s.name == pair.source and s.backend:
        lines.append(f'backend = "{s.backend}"')
    lines += [f'device = "{s.device if s else "cpu"}"', f"threads = {options.drafter_threads}",
              f"publication_size = {options.publication_size}"]
    if not spec.in_process or (s is not None and s.process and s.name == pair.source):
        lines.append("process = true")
    if pair.niceness is not None:
        lines.append(f"{'guess_nice' if guessed else 'nice'} = {pair.niceness}")
    if base.device_profile:
        lines += ["", "[device_profile]", f'name = "{base.device_profile["name"]}"']
        if base.device_profile.get("description"):
            lines.append(f'description = "{base.device_profile["description"]}"')
    return "\n".join(lines) + "\n"


__all__ = ["Pair", "choose", "collect", "config_text", "gap_pct", "missing_windows", "oracle",
           "price_cells", "price_grid", "records_by_source", "target_only_cells"]
