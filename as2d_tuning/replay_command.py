"""``as2d replay``: price saved trajectories under a device profile, on both clocks."""
from __future__ import annotations

import json
from pathlib import Path

import click

from as2d_core.decode.options import STARTS
from as2d_core.setup.options import bounds, decode_flag, parse_budgets

from .inputs import fail, job_mapper, ray_option
from .replay import PUBLICATION


@click.command("replay")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--profile", "profile_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--sources", default=None, help="Only as2d traces of these comma-separated sources.")
@click.option("--budgets", default=None, help="Re-simulate as2d at these budgets (e.g. 1-16, 3,7); default: as traced.")
@click.option("--publication", type=click.Choice(PUBLICATION), default="profile", show_default=True,
              help="Drafter publication times re-priced by the profile, or the traced native times.")
@decode_flag("align_window")
@click.option("--compare-native/--no-compare-native", default=None,
              help="Add native TPS and replay_mae_pct on both clocks (default: when the profile was measured on the "
                   "kind of machine that ran the traces).")
@click.option("--languages", default=None, help="Only windows of these comma-separated languages.")
@click.option("--nice", "niceness", type=click.IntRange(*bounds("drafter_nice")), default=None,
              help="Re-price the as2d runs with the drafter at this niceness (default: as traced).")
@click.option("--start", type=click.Choice(STARTS), default=None,
              help="Re-price the as2d runs with the drafter started at arrival or once prepared (default: as traced).")
@click.option("--load-calibrate", is_flag=True,
              help="Scale each window's costs by its own native target-only run (of the same round, when the bench "
                   "repeated rounds), its preparation and its decode apart (drifting load on shared cores).")
@ray_option
def replay(traces, profile_path, out_dir, sources, budgets, publication, align_window, compare_native, languages,
           niceness, start, load_calibrate, ray_address):
    """Price saved trajectories (as2d bench --save-traces) under a device profile, on the user's clock
    (arrival to final token) and the paper's (after the target's preparation)."""
    import statistics

    from as2d_bench.summary import summarize
    from .costs import costs_of, load_profile
    from .calibration import add_native_comparison, calibration_key, load_factors
    from .records import priced_as, read_traces, record_of
    from .replay import row_of
    from .tasks import replay_plan
    from .versions import staleness

    try:
        profile_data = load_profile(profile_path)
        budget_list = parse_budgets(budgets)
        wanted = {s.strip() for s in sources.split(",")} if sources else None
        raw = read_traces(traces, rounds=True)
        if languages:
            keep = {x.strip() for x in languages.split(",")}
            raw = [t for t in raw if t.get("language") in keep]
        records = [record_of(t) for t in raw]
    except (ValueError, OSError) as exc:
        fail(str(exc))
    warnings, same_machine = staleness(profile_data, traces)
    for warning in warnings:
        click.echo(f"Warning: {warning}", err=True)
    base_costs = costs_of(profile_data)
    factors = load_factors(raw, base_costs) if load_calibrate else {}
    if compare_native is None:
        compare_native = same_machine
    repriced = niceness is not None or start is not None
    rows, skipped, jobs, plans = [], [], [], []
    for trace, record in zip(raw, records):
        factor = factors.get(calibration_key(trace))
        if load_calibrate and factor is None:
            skipped.append({"window": record.window, "method": record.method, "reason": "no target-only run to calibrate"})
            continue
        costs = base_costs.scaled(*factor) if factor else base_costs
        if priced_as(record.method) == "published" and wanted is not None and record.source is not None \
                and record.source not in wanted:
            continue
        plan = [(None, record.name)]
        if record.method == "as2d" and budget_list:
            plan = [(b, record.name if len(budget_list) == 1 else record.name_at(b)) for b in budget_list]
        jobs.append((record, costs, [b for b, _ in plan], align_window, publication, niceness, start))
        plans.append((record, plan, trace))
    with job_mapper(ray_address) as mapper:
        priced = mapper(replay_plan, jobs)
    for (record, plan, trace), outs in zip(plans, priced):
        for (budget, name), out in zip(plan, outs):
            if isinstance(out, str):  # the profile cannot price it
                skipped.append({"window": record.window, "method": name, "reason": out})
                continue
            row = row_of(out, record, name)
            if "round" in trace:  # a bench's repeated rounds: each priced, its median round summarised
                row.update(round=trace["round"], median_round=trace["median_round"])
            traced = record.source is None or (not repriced and (budget is None or budget == record.budget))
            if not (compare_native and traced):
                row["native_tps"] = row["native_e2e_tps"] = None
            rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "results.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    summary = summarize([r for r in rows if r.get("median_round", True)])
    summary["replay"] = {"profile": str(profile_path), "profile_name": profile_data.get("name"),
                         "publication": publication, "budgets": budget_list, "sources": sorted(wanted or []),
                         "niceness": niceness, "start": start, "load_calibrated": load_calibrate,
                         "warnings": warnings, "skipped": skipped}
    for name, index in (("load_factors", 0), ("prepare_load_factors", 1)):
        values = [f[index] for f in factors.values() if f[index] is not None]
        if values:
            summary["replay"][name] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    if compare_native:
        add_native_comparison(summary, rows)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "pooled_e2e_tps", "pooled_tps", "ratio_vs_target_only", "windows", "exact_windows", "replay_e2e_mae_pct",
            "replay_mae_pct")}}))
    if skipped:
        click.echo(f"{len(skipped)} runs not priced; reasons in summary.json (replay.skipped)", err=True)
    click.echo(f"wrote {out_dir / 'results.jsonl'} and {out_dir / 'summary.json'}")
