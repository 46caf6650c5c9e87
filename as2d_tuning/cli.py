"""``as2d profile``, ``as2d replay`` and ``as2d select``.

Attached to ``as2d`` through the ``register_commands`` hook (``as2d_tuning.plugin``).
"""
from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import click

from as2d_core.decode.options import STARTS
from as2d_core.setup.options import bounds, decode_flag, parse_budgets

from .replay import CLOCKS, PUBLICATION


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


def _load_config(path: Path | None):
    """Validate a task configuration and build its target and source, as ``as2d run --config`` does;
    without one, ``as2d run``'s default target and drafter."""
    from as2d_core.setup.build import ConfigProblem, build_parts, parts_from_config
    from as2d_core.setup.plugins import UnknownPart

    try:
        if path is None:
            config = _run_default_config()
            return (config, *build_parts(config, None, with_source=True))
        config, _, target, source = parts_from_config(path, with_source=True)
    except (ConfigProblem, UnknownPart) as exc:
        _fail(str(exc))
    return config, target, source


def _run_default_config():
    """``as2d run``'s configuration without a file: its default target and drafter."""
    from as2d_core.setup.build import DEFAULT_SOURCE, DEFAULT_TARGET, resolve_config

    return resolve_config(None, {}, {"target.model": DEFAULT_TARGET, "source.name": DEFAULT_SOURCE})[0]


DEFAULT_AUDIO = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"


def _calibration_audio(paths: tuple[Path, ...]):
    """The calibration speech: the files given, joined, or the bundled clip."""
    import numpy as np

    from as2d_core.input.audio import AudioError, load_audio

    if not paths:
        if not DEFAULT_AUDIO.is_file():
            _fail(f"no calibration audio: {DEFAULT_AUDIO} is not here; pass --audio with speech the drafter drafts")
        paths = (DEFAULT_AUDIO,)
    try:
        return np.concatenate([load_audio(p) for p in paths])
    except AudioError as exc:
        _fail(str(exc))


def _numbers(text: str, what: str, kind=int) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        _fail(f"{what} must be comma-separated numbers, got {text!r}")


@click.command("profile")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Task configuration to profile (target, drafter, threads, niceness); default: as2d run's "
                   "target and drafter.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Profile file to write (.json or .toml is read back; JSON is written).")
@click.option("--audio", "audio_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Calibration speech (repeatable; the files are joined), in a language the drafters draft; "
                   "default: the bundled examples/ljspeech_en_w00.wav.")
@click.option("--kmax", type=click.IntRange(1, 64), default=16, show_default=True, help="Largest physical width K.")
@click.option("--offsets", default="0,32,64", show_default=True, help="Target-prefix offsets (tokens).")
@click.option("--repeats", type=click.IntRange(1), default=5, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=1, show_default=True)
@click.option("--decodes", type=click.IntRange(1), default=3, show_default=True, help="Real decodes per method for loop costs.")
@click.option("--nice", "niceness", default=None,
              help="Drafter niceness values to measure beside the target (comma-separated); default: the "
                   "configuration's nice and guess_nice.")
@click.option("--lengths", default=None,
              help="Audio lengths (s) at which the preparation and the drafters' jobs are measured; default: "
                   "1 to 30 s in 13 steps.")
@click.option("--job-repeats", type=click.IntRange(1), default=3, show_default=True,
              help="Target preparations and drafter jobs per audio length.")
@click.option("--rounds", type=click.IntRange(1), default=8, show_default=True,
              help="Rounds of the contention measurements (the target and each drafter alone and side by side), "
                   "per drafter and niceness.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="R(K) figure (default: OUT with .png).")
@click.option("--sources", "other_names", default=None,
              help="Other drafters to price too (comma-separated), for replay and select across sources.")
@click.option("--quiet", is_flag=True, help="No progress lines.")
def profile(config_path, out_path, audio_paths, kmax, offsets, repeats, warmup, decodes, niceness, lengths,
            job_repeats, rounds, plot_path, other_names, quiet):
    """Measure the configured target and drafters on this machine and write a device profile."""
    from as2d_core.setup.build import build_source
    from as2d_core.setup.paths import models_dir
    from as2d_core.setup.plugins import UnknownPart
    from .profile import LENGTHS, Measurement, ProfileError, build_profile, plot_r_of_k

    nice = _numbers(niceness, "--nice") if niceness else None
    low, high = bounds("drafter_nice")
    if nice is not None and (not nice or any(not low <= n <= high for n in nice)):
        _fail(f"--nice values must be between {low} and {high}, got {niceness}")
    grid = _numbers(lengths, "--lengths", float) if lengths else list(LENGTHS)
    if not grid or min(grid) <= 0:
        _fail(f"--lengths must be positive seconds, got {lengths}")
    audio = _calibration_audio(audio_paths)
    config, target, source = _load_config(config_path)
    options = config.decode
    nice = nice or sorted({options.drafter_nice, options.guess_nice})
    sources = {} if source is None else {source.name: source}
    try:
        for name in (n.strip() for n in (other_names or "").split(",")):
            if name and name not in sources:
                sources[name] = build_source(name)
    except UnknownPart as exc:
        _fail(str(exc))

    started = time.perf_counter()

    def say(message: str) -> None:
        if not quiet:
            click.echo(f"[profile {time.perf_counter() - started:4.0f} s] {message}", err=True)

    measurement = Measurement(target, sources, audio, config.language, options, kmax=kmax, offsets=_numbers(offsets, "--offsets"),
                              repeats=repeats, warmup=warmup, decodes=decodes, niceness=nice, lengths=sorted(grid),
                              job_repeats=job_repeats, rounds=rounds, say=say)
    try:
        data = build_profile(config, measurement, models_dir=models_dir())
    except ProfileError as exc:
        _fail(str(exc))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1))
    plot_path = plot_path or out_path.with_suffix(".png")
    plot_r_of_k({data["name"]: data}, plot_path)
    click.echo("K  alone_ms  shared_ms  R(K)%")
    for k, s in data["verify_s"]["alone"].items():
        shared = data["verify_s"].get("shared", {}).get(k)
        click.echo(f"{k:>2} {1000 * s['median']:8.2f} {1000 * shared['median'] if shared else float('nan'):9.2f} "
                   f"{data['r_k_pct'][k]['r_pct']:6.1f}")
    prepare = data["prepare_s"]["alone"]
    click.echo(f"target preparation alone: {1000 * min(v['median'] for v in prepare.values()):.0f}-"
               f"{1000 * max(v['median'] for v in prepare.values()):.0f} ms")
    for name, d in data.get("drafters", {}).items():
        fit = d["piece_s"]
        click.echo(f"drafter {name}: piece {1000 * fit['first']:.1f} ms + {1000 * fit['per_token']:.2f} ms per token"
                   f" (later pieces {1000 * fit['next']:.1f} ms +), encoder "
                   f"{1000 * min(v['median'] for v in d['prepare_s'].values()):.0f}-"
                   f"{1000 * max(v['median'] for v in d['prepare_s'].values()):.0f} ms")
        for n, c in d["niceness"].items():
            click.echo(f"  niceness {n}: target preparation x{c['target_slowdown']['prepare']:.2f} beside it; it runs "
                       f"x{c['drafter_slowdown']['prepare']:.2f} beside the preparation, "
                       f"x{c['drafter_slowdown']['verify']:.2f} beside verification")
    click.echo(f"wrote {out_path} and {plot_path} in {data['duration_s']:.0f} s")


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
@_ray_option
def replay(traces, profile_path, out_dir, sources, budgets, publication, align_window, compare_native, languages,
           niceness, start, load_calibrate, ray_address):
    """Price saved trajectories (as2d bench --save-traces) under a device profile, on the user's clock
    (arrival to final token) and the paper's (after the target's preparation)."""
    import statistics

    from as2d_bench.summary import summarize
    from .costs import costs_of, load_profile
    from .profile import staleness
    from .replay import (CLOCKS, calibration_key, load_factors, mae, priced_as, read_traces,
                         record_of, row_of)
    from .tasks import replay_plan

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
        _fail(str(exc))
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
    with _mapper(ray_address) as mapper:
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
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "pooled_e2e_tps", "pooled_tps", "ratio_vs_target_only", "windows", "exact_windows", "replay_e2e_mae_pct",
            "replay_mae_pct")}}))
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
@decode_flag("align_window")
@click.option("--clock", type=click.Choice(CLOCKS), default="e2e", show_default=True,
              help="Rank on the user's clock (arrival to final token) or the paper's decode clock (after preparation).")
@click.option("--nice", "niceness", default=None,
              help="Drafter niceness values to choose from (comma-separated); default: those the profile measured.")
@click.option("--starts", default="arrival,prepared", show_default=True,
              help="Drafter starts to choose from: arrival (beside the target's preparation) and/or prepared.")
@click.option("--json", "as_json", is_flag=True)
@_ray_option
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
    from .costs import costs_of, load_profile
    from .replay import read_traces
    from .select import choose, collect, config_text, gap_pct, missing_windows, oracle, plot_budgets, pooled, \
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
            base = _run_default_config()
        else:
            raise ValueError(f"no base configuration ({base_path} is not a file): pass --config")
        start_list = [x.strip() for x in starts.split(",") if x.strip()]
        if not start_list or any(x not in STARTS for x in start_list):
            raise ValueError(f"--starts takes {' and/or '.join(STARTS)}, got {starts!r}")
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    costs = costs_of(profile_data)
    if clock == "e2e" and costs.prepare(None) is None:
        _fail(f"{profile_path} has no preparation costs, so the user's clock cannot be priced: make the profile "
              "again with as2d profile, or rank on the paper's clock with --clock decode")
    measured = sorted({n for name in names if costs.drafter(name) is not None for n in costs.drafter(name).niceness})
    nice_list = _numbers(niceness, "--nice") if niceness else (measured or [None])
    work_dir = work_dir or out_path.parent / f"{out_path.stem}-select"
    work_dir.mkdir(parents=True, exist_ok=True)
    if trace_paths:
        traces = read_traces(trace_paths)
    else:
        config, target, _ = _load_config(base_path)
        try:
            parts = {n: build_source(n) for n in names}
        except UnknownPart as exc:
            _fail(str(exc))
        traces = []
        try:
            for manifest in dict.fromkeys([dev_manifest, test_manifest]):
                traces += collect(manifest, target, parts, config.decode, work_dir / manifest.stem,
                                  progress=not as_json)
        except (ConfigMismatch, MixedMachines) as exc:  # traces collected before, under another configuration
            _fail(str(exc))
    records = records_by_source(traces, names)
    lacking = missing_windows(records, dev + test)
    if lacking:
        _fail("no as2d trace of " + "; ".join(f"{n}: {', '.join(ws[:5])}{' ...' if len(ws) > 5 else ''}"
                                              for n, ws in lacking.items())
              + " (collect them with as2d bench --save-traces, or leave out --traces)")
    choices = dict(niceness=nice_list, starts=start_list, clock=clock)
    with _mapper(ray_address) as mapper:
        dev_grid = price_grid(records, costs, budget_list, dev, align_window, mapper, **choices)
        test_grid = price_grid(records, costs, budget_list, test, align_window, mapper, **choices)
    try:
        best, dev_tps = choose(dev_grid)
    except ValueError as exc:
        _fail(str(exc))
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
    out_path.write_text(config_text(base, best, note, guessed))
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
    }
    (work_dir / "selection.json").write_text(json.dumps(report, indent=2))
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("clock", "selected", "oracle_pooled_tps", "gap_pct")}))
    else:
        click.echo(f"selected {best.source} budget {best.budget} niceness {best.niceness} start {best.start}: dev "
                   f"pooled {dev_tps:.2f} TPS ({clock} clock); test pooled {selected_test:.2f}, oracle "
                   f"{oracle_tps:.2f}, gap {gap:.2f}%")
        click.echo(f"wrote {out_path}, {plot_path}, {work_dir / 'selection.json'}")


@click.group()
def _main() -> None:
    """Tuning commands (before the core attaches them to ``as2d``)."""


for _command in (profile, replay, select):
    _main.add_command(_command)

if __name__ == "__main__":
    _main()
