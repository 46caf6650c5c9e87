"""``as2d profile``, ``as2d replay`` and ``as2d select``.

Attached to ``as2d`` through the ``register_commands`` hook (``as2d_tuning.plugin``).
"""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import click

from .replay import PUBLICATION


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)


def _ray_option(command):
    return click.option(
        "--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
        help="Price the source x budget sweep as Ray tasks: on the cluster at ADDRESS, else the one this machine "
             "belongs to, else a new local one (pip install 'as2d[ray]'). Same output as without.")(command)


@contextmanager
def _mapper(ray_address: str | None):
    """How independent pricing jobs run: here, or (``--ray``) as tasks on a Ray cluster, joined for the command."""
    from .tasks import local_map, ray_map

    if ray_address is None:
        yield local_map
        return
    from as2d_bench.distributed import RayUnavailable, ray_cluster

    try:
        with ray_cluster(ray_address):
            yield ray_map
    except RayUnavailable as exc:
        _fail(str(exc))


def _load_config(path: Path):
    """Validate a task configuration and build its target and source, as ``as2d run --config`` does."""
    from as2d_core.build import ConfigProblem, parts_from_config

    try:
        config, _, target, source = parts_from_config(path, with_source=True)
    except ConfigProblem as exc:
        _fail(str(exc))
    return config, target, source


def _request(audio: Path | None, language: str | None):
    import numpy as np

    from as2d_core.audio import load_audio
    from as2d_core.contracts import Request

    if audio is None:  # costs depend on shapes, not content: low noise, continuation from known text
        samples = np.random.default_rng(0).normal(0, 0.01, 16_000 * 10).astype(np.float32)
        return Request(request_id="profile-noise-10s", audio=samples, language=language or "en")
    return Request(request_id=f"profile-{audio.stem}", audio=load_audio(audio), language=language)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@click.command("profile")
@click.option("--config", "config_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Profile file to write (.json or .toml is read back; JSON is written).")
@click.option("--audio", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Calibration audio (16 kHz); without it, 10 s of low noise and a known text continuation.")
@click.option("--kmax", type=int, default=16, show_default=True, help="Largest physical width K.")
@click.option("--offsets", default="0,32,64", show_default=True, help="Target-prefix offsets (tokens).")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--warmup", type=int, default=1, show_default=True)
@click.option("--decodes", type=int, default=3, show_default=True, help="Real decodes per method for loop costs.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="R(K) figure (default: OUT with .png).")
@click.option("--sources", "other_names", default=None,
              help="Other drafters to price too (comma-separated), for replay and select across sources.")
def profile(config_path, out_path, audio, kmax, offsets, repeats, warmup, decodes, plot_path, other_names):
    """Measure the configured target and drafter on this machine and write a device profile."""
    from as2d_core.paths import models_dir
    from .profile import build_profile, plot_r_of_k

    from as2d_core.build import build_part

    config, target, source = _load_config(config_path)
    others = {n.strip(): build_part("source", n.strip()) for n in (other_names or "").split(",")
              if n.strip() and (config.source is None or n.strip() != config.source.name)}
    request = _request(audio, config.language)
    data = build_profile(config, target, source, request, kmax=kmax, offsets=_ints(offsets), repeats=repeats,
                         warmup=warmup, decodes=decodes, models_dir=models_dir(), other_sources=others)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1))
    plot_path = plot_path or out_path.with_suffix(".png")
    plot_r_of_k({data["name"]: data}, plot_path)
    click.echo("K  alone_ms  shared_ms  R(K)%")
    for k, s in data["verify_s"]["alone"].items():
        shared = data["verify_s"].get("shared", {}).get(k)
        click.echo(f"{k:>2} {1000 * s['median']:8.2f} {1000 * shared['median'] if shared else float('nan'):9.2f} "
                   f"{data['r_k_pct'][k]['r_pct']:6.1f}")
    for name, d in data.get("drafters", {}).items():
        click.echo(f"drafter {name}: {1000 * d['draft_step_s']['alone']['median']:.2f} ms per token alone, "
                   f"{1000 * d['draft_step_s']['shared']['median']:.2f} ms with the target running")
    click.echo(f"wrote {out_path} and {plot_path}")


@click.command("replay")
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--profile", "profile_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--sources", default=None, help="Only as2d traces of these comma-separated sources.")
@click.option("--budgets", default=None, help="Re-simulate as2d at these budgets (e.g. 1-16, 3,7); default: as traced.")
@click.option("--publication", type=click.Choice(PUBLICATION), default="profile", show_default=True,
              help="Drafter publication times re-priced by the profile, or the traced native times.")
@click.option("--align-window", type=int, default=8, show_default=True)
@click.option("--compare-native/--no-compare-native", default=None,
              help="Add native TPS and replay_mae_pct (default: when the profile was measured on this machine).")
@click.option("--languages", default=None, help="Only windows of these comma-separated languages.")
@click.option("--load-calibrate", is_flag=True,
              help="Scale each window's costs by its own native target-only run (drifting load on shared cores).")
@_ray_option
def replay(traces, profile_path, out_dir, sources, budgets, publication, align_window, compare_native, languages,
           load_calibrate, ray_address):
    """Price saved trajectories (as2d bench --save-traces) under a device profile."""
    import platform
    import statistics

    from as2d_bench.summary import summarize
    from .costs import costs_of, load_profile
    from .replay import DECOUPLED, load_factors, mae, parse_budgets, read_traces, record_of, row_of
    from .tasks import replay_plan

    try:
        profile_data = load_profile(profile_path)
        budget_list = parse_budgets(budgets)
        wanted = {s.strip() for s in sources.split(",")} if sources else None
        raw = read_traces(traces)
        if languages:
            keep = {x.strip() for x in languages.split(",")}
            raw = [t for t in raw if t.get("language") in keep]
        records = [record_of(t) for t in raw]
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    base_costs = costs_of(profile_data)
    factors = load_factors(raw, base_costs) if load_calibrate else {}
    if compare_native is None:
        compare_native = (profile_data.get("machine") or {}).get("hostname") == platform.node()
    rows, skipped, jobs, plans = [], [], [], []
    for trace, record in zip(raw, records):
        factor = factors.get((trace.get("_file", ""), record.window))
        if load_calibrate and factor is None:
            skipped.append({"window": record.window, "method": record.method, "reason": "no target-only run to calibrate"})
            continue
        costs = base_costs.scaled(factor) if factor else base_costs
        if record.method in DECOUPLED and wanted is not None and record.source is not None \
                and record.source not in wanted:
            continue
        plan = [(None, record.method)]
        if record.method == "as2d" and budget_list:
            plan = [(b, record.method if len(budget_list) == 1 else f"as2d-b{b}") for b in budget_list]
        jobs.append((record, costs, [b for b, _ in plan], align_window, publication))
        plans.append((record, plan))
    with _mapper(ray_address) as mapper:
        priced = mapper(replay_plan, jobs)
    for (record, plan), outs in zip(plans, priced):
        for (budget, name), out in zip(plan, outs):
            if isinstance(out, str):  # the profile cannot price it
                skipped.append({"window": record.window, "method": name, "reason": out})
                continue
            row = row_of(out, record, name)
            traced = budget is None or budget == record.budget or record.source is None
            if not (compare_native and traced):
                row["native_tps"] = None
            rows.append(row)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "results.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    summary = summarize(rows)
    summary["replay"] = {"profile": str(profile_path), "profile_name": profile_data.get("name"),
                         "publication": publication, "budgets": budget_list, "sources": sorted(wanted or []),
                         "load_calibrated": load_calibrate, "skipped": skipped}
    if factors:
        summary["replay"]["load_factors"] = {"median": statistics.median(factors.values()),
                                             "min": min(factors.values()), "max": max(factors.values())}
    if compare_native:
        by_method = {}
        for row in rows:
            by_method.setdefault(row["method"], []).append(row)
        runs: dict[str, list[dict]] = {}
        for r in rows:
            if r.get("native_tps"):
                runs.setdefault(f"{r['window']}/{r['method']}", []).append(r)
        summary["native"] = {
            "windows": {key: {"native_tps": statistics.median(r["native_tps"] for r in rs),
                              "replay_tps": statistics.median(r["tps"] for r in rs), "runs": len(rs)}
                        for key, rs in runs.items()},
            "methods": {m: mae(rs) for m, rs in by_method.items()},
        }
        # The headline (D.3) compares replay with native decoupled runs; calibrated target-only rows are exact.
        decoupled = [r for r in rows if r["method"].startswith("as2d")]
        summary["replay_mae_pct"] = mae(decoupled or rows)["replay_mae_pct"]
        summary["replay_mae_scope"] = "as2d runs" if decoupled else "all runs"
        for name, stats in summary["methods"].items():
            stats["replay_mae_pct"] = summary["native"]["methods"].get(name, {}).get("replay_mae_pct")
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "pooled_tps", "ratio_vs_target_only", "windows", "exact_windows", "replay_mae_pct")}}))
    if skipped:
        click.echo(f"{len(skipped)} runs not priced; reasons in summary.json (replay.skipped)", err=True)
    click.echo(f"wrote {out_dir / 'results.jsonl'} and {out_dir / 'summary.json'}")


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
@click.option("--align-window", type=int, default=8, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_ray_option
def select(dev_manifest, test_manifest, profile_path, sources, budgets, out_path, base_path, trace_paths, work_dir,
           align_window, as_json, ray_address):
    """Rank every feasible source and fixed budget on DEV_MANIFEST by replayed pooled TPS; report the test oracle gap."""
    from as2d_bench.folder import ConfigMismatch
    from as2d_bench.machine import MixedMachines
    from as2d_bench.runner import read_manifest
    from as2d_core.build import build_part
    from as2d_core.config import check_file
    from .costs import costs_of, load_profile
    from .replay import parse_budgets, read_traces
    from .select import choose, collect, config_text, gap_pct, oracle, plot_budgets, pooled, price_grid, \
        records_by_source, target_only_cells

    try:
        profile_data = load_profile(profile_path)
        budget_list = parse_budgets(budgets)
        names = [s.strip() for s in sources.split(",") if s.strip()]
        dev = [w.id for w in read_manifest(dev_manifest)]
        test = [w.id for w in read_manifest(test_manifest)]
        base_path = base_path or Path(profile_data.get("config") or "")
        base = check_file(base_path).config if base_path and base_path.is_file() else None
        if base is None:
            raise ValueError("no base configuration: pass --config")
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    work_dir = work_dir or out_path.parent / f"{out_path.stem}-select"
    work_dir.mkdir(parents=True, exist_ok=True)
    if trace_paths:
        traces = read_traces(trace_paths)
    else:
        config, target, _ = _load_config(base_path)
        parts = {n: build_part("source", n) for n in names}
        traces = []
        try:
            for manifest in dict.fromkeys([dev_manifest, test_manifest]):
                traces += collect(manifest, target, parts, config.decode_options(), work_dir / manifest.stem,
                                  progress=not as_json)
        except (ConfigMismatch, MixedMachines) as exc:  # traces collected before, under another configuration
            _fail(str(exc))
    costs = costs_of(profile_data)
    records = records_by_source(traces, names)
    with _mapper(ray_address) as mapper:
        dev_grid = price_grid(records, costs, budget_list, dev, align_window, mapper)
        test_grid = price_grid(records, costs, budget_list, test, align_window, mapper)
    try:
        best, dev_tps = choose(dev_grid)
    except ValueError as exc:
        _fail(str(exc))
    selected_test = pooled(test_grid[best])
    oracle_tps, picks = oracle(test_grid)
    gap = gap_pct(selected_test, oracle_tps)
    note = (f"selected by as2d select: {best.source} budget {best.budget}, pooled replay TPS {dev_tps:.3f} on "
            f"{dev_manifest.name} under profile {profile_data.get('name')}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(config_text(base, best, note))
    plot_path = work_dir / "budgets.png"
    dev_target_only = pooled(target_only_cells(records, costs, dev))
    plot_budgets(dev_grid, best, plot_path, dev_target_only)
    ranking = sorted(({"source": p.source, "budget": p.budget, "pooled_tps": pooled(c)} for p, c in dev_grid.items()),
                     key=lambda r: -r["pooled_tps"])
    report = {
        "selected": {"source": best.source, "budget": best.budget, "pooled_tps": dev_tps},
        "dev_target_only_pooled_tps": dev_target_only,
        "test_selected_pooled_tps": selected_test,
        "test_target_only_pooled_tps": pooled(target_only_cells(records, costs, test)),
        "oracle_pooled_tps": oracle_tps,
        "gap_pct": gap,
        "oracle_picks": {w: {"source": p.source, "budget": p.budget} for w, p in picks.items()},
        "dev_ranking": ranking,
        "infeasible_budgets": [b for b in budget_list if not costs.feasible_budget(b)],
        "dev_windows": len(dev), "test_windows": len(test),
    }
    (work_dir / "selection.json").write_text(json.dumps(report, indent=2))
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("selected", "oracle_pooled_tps", "gap_pct")}))
    else:
        click.echo(f"selected {best.source} budget {best.budget}: dev pooled {dev_tps:.2f} TPS; test pooled "
                   f"{selected_test:.2f}, oracle {oracle_tps:.2f}, gap {gap:.2f}%")
        click.echo(f"wrote {out_path}, {plot_path}, {work_dir / 'selection.json'}")


@click.group()
def _main() -> None:
    """Tuning commands (before the core attaches them to ``as2d``)."""


for _command in (profile, replay, select):
    _main.add_command(_command)

if __name__ == "__main__":
    _main()
