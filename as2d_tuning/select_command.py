"""``as2d select``: rank drafter, budget, niceness and start on development windows by replayed TPS, and write
the chosen pair's task configuration."""
from __future__ import annotations

import json
from pathlib import Path

import click

from as2d_core.decode.options import STARTS
from as2d_core.setup.options import decode_flag, parse_budgets

from .inputs import fail, job_mapper, load_config, numbers, ray_option, run_default_config
from .replay import CLOCKS


@click.command("select")
@click.argument("dev_manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--test", "test_manifest", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--profile", "profile_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--sources", required=True, help="Comma-separated sources to consider.")
@click.option("--budgets", default="1-16", show_default=True)
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Task configuration (TOML) of the selected pair.")
@click.option("--config", "base_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Base task configuration (target, threads); default: the profile's.")
@click.option("--traces", "trace_paths", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Reuse saved trajectories instead of collecting them (repeatable).")
@click.option("--work", "work_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where collected traces and the plot go (default: next to OUT).")
@decode_flag("align_window")
@click.option("--clock", type=click.Choice(CLOCKS), default="e2e", show_default=True,
              help="Rank on the user's clock (arrival to final token) or the paper's decode clock (after preparation).")
@click.option("--nice", "niceness", default=None,
              help="Drafter niceness values to choose from (comma-separated); default: those the profile measured.")
@click.option("--starts", default="arrival,prepared", show_default=True,
              help="Drafter starts to choose from: arrival (beside the target's preparation) and/or prepared.")
@click.option("--json", "as_json", is_flag=True)
@ray_option
def select(dev_manifest, test_manifest, profile_path, sources, budgets, out_path, base_path, trace_paths, work_dir,
           align_window, clock, niceness, starts, as_json, ray_address):
    """Rank every feasible source, fixed budget, drafter niceness and start on DEV_MANIFEST by replayed pooled TPS
    (the user's clock by default); report the test oracle gap."""
    from as2d_bench.folder import ConfigMismatch
    from as2d_bench.machine import MixedMachines
    from as2d_bench.runner import read_manifest
    from as2d_core.setup.build import build_source
    from as2d_core.setup.config import check_file
    from as2d_core.setup.plugins import UnknownPart
    from .batching import replayed_batch_profile as batch_profile
    from .costs import costs_of, load_profile
    from .plots import plot_budgets
    from .records import read_traces
    from .replay import replay_record
    from .select import choose, collect, config_text, gap_pct, missing_windows, oracle, pooled, \
        price_grid, records_by_source, target_only_cells

    try:
        profile_data = load_profile(profile_path)
        budget_list = parse_budgets(budgets)
        names = [s.strip() for s in sources.split(",") if s.strip()]
        dev = [w.id for w in read_manifest(dev_manifest)]
        test = [w.id for w in read_manifest(test_manifest)]
        base_path = base_path or Path(profile_data.get("config") or "")
        if base_path.is_file():
            base = check_file(base_path).config
        elif base_path == Path("<command line>"):  # profiled without --config: as2d run's target and drafter
            base = run_default_config()
        else:
            raise ValueError(f"no base configuration ({base_path} is not a file): pass --config")
        start_list = [x.strip() for x in starts.split(",") if x.strip()]
        if not start_list or any(x not in STARTS for x in start_list):
            raise ValueError(f"--starts takes {' and/or '.join(STARTS)}, got {starts!r}")
    except (ValueError, OSError) as exc:
        fail(str(exc))
    costs = costs_of(profile_data)
    if clock == "e2e" and costs.prepare(None) is None:
        fail(f"{profile_path} has no preparation costs, so the user's clock cannot be priced: make the profile "
              "again with as2d profile, or rank on the paper's clock with --clock decode")
    measured = sorted({n for name in names if costs.drafter(name) is not None for n in costs.drafter(name).niceness})
    nice_list = numbers(niceness, "--nice") if niceness else (measured or [None])
    work_dir = work_dir or out_path.parent / f"{out_path.stem}-select"
    work_dir.mkdir(parents=True, exist_ok=True)
    if trace_paths:
        traces = read_traces(trace_paths)
    else:
        config, target, _ = load_config(base_path)
        try:
            parts = {n: build_source(n) for n in names}
        except UnknownPart as exc:
            fail(str(exc))
        traces = []
        try:
            for manifest in dict.fromkeys([dev_manifest, test_manifest]):
                traces += collect(manifest, target, parts, config.decode, work_dir / manifest.stem,
                                  progress=not as_json)
        except (ConfigMismatch, MixedMachines) as exc:  # traces collected before, under another configuration
            fail(str(exc))
    records = records_by_source(traces, names)
    lacking = missing_windows(records, dev + test)
    if lacking:
        fail("no as2d trace of " + "; ".join(f"{n}: {', '.join(ws[:5])}{' ...' if len(ws) > 5 else ''}"
                                              for n, ws in lacking.items())
              + " (collect them with as2d bench --save-traces, or leave out --traces)")
    choices = dict(niceness=nice_list, starts=start_list, clock=clock)
    with job_mapper(ray_address) as mapper:
        dev_grid = price_grid(records, costs, budget_list, dev, align_window, mapper, **choices)
        test_grid = price_grid(records, costs, budget_list, test, align_window, mapper, **choices)
    try:
        best, dev_tps = choose(dev_grid)
    except ValueError as exc:
        fail(str(exc))
    selected_test = pooled(test_grid[best])
    oracle_tps, picks = oracle(test_grid)
    gap = gap_pct(selected_test, oracle_tps)

    def described(p) -> dict:
        return {"source": p.source, "budget": p.budget, "niceness": p.niceness, "start": p.start}

    note = (f"selected by as2d select: {best.source} budget {best.budget}, niceness {best.niceness}, start "
            f"{best.start}; pooled replay TPS {dev_tps:.3f} ({clock} clock) on {dev_manifest.name} under profile "
            f"{profile_data.get('name')}")
    guessed = any(not r.named for per in records.values() for r in per.values())
    out_path.parent.mkdir(parents=True, exist_ok=True)
    drafted = [records[best.source][w] for w in dev if records[best.source][w].source is not None]  # not fallbacks
    batch = batch_profile(profile_data, [replay_record(r, costs, best.budget, align_window, niceness=best.niceness,
                                                       start=best.start) for r in drafted],
                          f"as2d select: {best.source} budget {best.budget} replayed on the {len(drafted)} windows "
                          f"of {dev_manifest.name} it drafts")
    priced = None  # the profile the server's and waves' prices come from: a copy with the replay's tokens per call
    if batch is not None:
        priced = (work_dir / "profile.json").resolve()
        priced.write_text(json.dumps(batch, indent=1))
    out_path.write_text(config_text(base, best, note, guessed, profile=priced))
    plot_path = work_dir / "budgets.png"
    dev_target_only = pooled(target_only_cells(records, costs, dev, clock))
    plot_budgets(dev_grid, best, plot_path, dev_target_only, clock)
    ranking = sorted(({**described(p), "pooled_tps": pooled(c)} for p, c in dev_grid.items()),
                     key=lambda r: -r["pooled_tps"])
    report = {
        "clock": clock,
        "selected": {**described(best), "pooled_tps": dev_tps},
        "dev_target_only_pooled_tps": dev_target_only,
        "test_selected_pooled_tps": selected_test,
        "test_target_only_pooled_tps": pooled(target_only_cells(records, costs, test, clock)),
        "oracle_pooled_tps": oracle_tps,
        "gap_pct": gap,
        "oracle_picks": {w: described(p) for w, p in picks.items()},
        "dev_ranking": ranking,
        "infeasible_budgets": [b for b in budget_list
                               if not any(costs.feasible_budget(b, source=n, niceness=x) for n in names for x in nice_list)],
        "dev_windows": len(dev), "test_windows": len(test),
        "batch": None if batch is None else {k: batch["batch_s"].get(k) for k in (
            "speculate_rows", "tokens_per_call", "profiled_speculate_rows", "profiled_tokens_per_call", "width",
            "replayed_mean_width")},
    }
    (work_dir / "selection.json").write_text(json.dumps(report, indent=2))
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("clock", "selected", "oracle_pooled_tps", "gap_pct", "batch")}))
    else:
        click.echo(f"selected {best.source} budget {best.budget} niceness {best.niceness} start {best.start}: dev "
                   f"pooled {dev_tps:.2f} TPS ({clock} clock); test pooled {selected_test:.2f}, oracle "
                   f"{oracle_tps:.2f}, gap {gap:.2f}%")
        if batch is not None:
            b = batch["batch_s"]
            click.echo(f"a request drafts while fewer than {b['speculate_rows']} others decode (the replay commits "
                       f"{b['tokens_per_call']:.2f} tokens a call; the profile's calibration "
                       f"{b['profiled_tokens_per_call']:.2f}): {priced}")
        click.echo(f"wrote {out_path}, {plot_path}, {work_dir / 'selection.json'}")
