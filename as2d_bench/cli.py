"""``as2d bench MANIFEST --methods LIST --out DIR [--sources A,B] [--save-traces]`` (attached to ``as2d`` through the ``register_commands`` hook, ``as2d_bench.plugin``).

Resumable (``folder``): each window's rows are appended as it finishes; the same command again runs only
the windows not yet in DIR. ``--ray [ADDRESS]`` runs the windows on Ray workers (``distributed``).

By default the as2d methods draft with ``as2d run``'s drafter and the serial methods (``sd-k*``, ``asp``,
``as2d-no-td``) with the first that can score a prefix (``spec.default_drafters``). A named source (``--source``,
a ``--config`` file's ``[source]``) serves every method; with ``--sources A,B`` every source-dependent method runs
once per source: ``as2d`` with A, ``as2d@B`` with B (likewise the others); see ``runner``.
``--config`` goes through the same ``cli.shared.command_config`` and ``build.pipeline_options`` as ``as2d run``.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from as2d_core.setup.build import DEFAULT_SOURCE, DEFAULT_TARGET, pipeline_options, source_spec
from as2d_core.cli.shared import command_config, config_option, given
from as2d_core.decode.faults import FAULTS
from as2d_core.setup.options import config_keys, option_flags
from as2d_core.decode.methods import BUILTIN

from .folder import says_how_to_resume
from .runner import bench_methods
from .summary import SD
from .summary import SD_PARTS
from .spec import SERIAL_SOURCE

# command-line parameter -> the dotted configuration key it sets (over --config's value)
BENCH_KEYS = {"target_name": "target.model", "target_backend": "target.backend", "source_name": "source.name",
              **config_keys()}
# the built-in methods, sd standing for its four fixed widths (and the peers the installed plugins ask for)
DEFAULT_METHODS = ",".join(m for m in bench_methods()
                           if m == SD or (m in {b.name for b in BUILTIN} and m not in SD_PARTS))


@click.command("bench")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--methods", default=None, show_default=f"{DEFAULT_METHODS} and the plugins' default peers",
              help=f"Comma-separated, from: {', '.join(bench_methods())} and the outside peers the plugins offer "
                   "(`as2d plugins list` shows them as peer:NAME). 'sd' runs sd-k5..sd-k8 and reports their mean. "
                   "Default with --config: target-only and the configuration's method.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--save-traces", is_flag=True, help="Write every window's operation trajectory to DIR/traces.jsonl.")
@config_option
@click.option("--target", "target_name", default=DEFAULT_TARGET, show_default=True)
@click.option("--target-backend", default=None, help="Backend of the target (e.g. onnxruntime, mnn); default: the plugin's.")
@click.option("--source-backend", default=None,
              help="Backend of every source; default: the --config file's [source] backend, else each plugin's.")
@click.option("--source", "source_name", default=DEFAULT_SOURCE,
              help="The drafter of every method (one registered source; see `as2d sources list`). Default: the as2d "
                   f"methods draft with {DEFAULT_SOURCE}, as `as2d run` does, and the serial ones (sd-k*, asp, "
                   f"as2d-no-td) with {SERIAL_SOURCE}, which can score a prefix.")
@click.option("--sources", "source_names", default=None,
              help="Several drafters, comma-separated, instead of --source: each source-dependent method runs once "
                   "per source, named METHOD for the first and METHOD@SOURCE for the others. NAME+process runs "
                   "that source in its own process (as2d methods only; serial baselines need it in-process).")
@option_flags
@click.option("--limit", type=int, default=None, help="Only the first N windows.")
@click.option("--languages", default=None, help="Only windows of these comma-separated languages.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rounds of every method on each window, interleaved; each method keeps its round of median "
                   "end-to-end time (a single run of a short window scatters by a tenth or more).")
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="One untimed pass on the first window.")
@click.option("--fresh", is_flag=True,
              help="Discard the results already in OUT instead of resuming (OUT keeps the windows it has; "
                   "running the same command again runs only the others).")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Run windows on a Ray cluster: the one at ADDRESS, else the one this machine belongs to, "
                   "else a new local one (pip install 'as2d[ray]').")
@click.option("--workers", type=int, default=None, help="Ray workers (default: as many as the cluster's CPUs hold).")
@click.option("--cpus-per-worker", type=float, default=None,
              help="CPUs each Ray worker reserves (default: the threads one window uses at once).")
@click.option("--pool-machines", is_flag=True, help="Pool rows measured on different kinds of machine.")
@click.option("--fault", type=click.Choice(FAULTS), default=None,
              help="Break every drafter this way (as2d_core.decode.faults; as2d methods only): the answers must stay exact.")
@click.option("--detect-language", is_flag=True,
              help="Requests name no language: every method detects it, as for a user who gives none "
                   "(the manifest's lang then only labels the rows).")
@click.option("--quiet", is_flag=True, help="No progress bar (shown on stderr only when it is a terminal).")
@says_how_to_resume
@click.pass_context
def bench(ctx, manifest, methods, out_dir, save_traces, source_backend, source_names, limit, languages, repeats,
          warmup, fresh, ray_address, workers, cpus_per_worker, pool_machines, fault, detect_language, quiet,
          **model_options):
    """Run METHODS on every window of MANIFEST (JSONL: id, path, lang, text) and write results to OUT.

    With --config: its target, source, task, instruction and decoding options, under the flags given;
    its language, unless --languages, chooses the windows. Resumable: each window's rows are appended to
    OUT/results.jsonl as it finishes, and the same command run again skips the windows already there
    (OUT/run.json records the configuration).
    """
    from .folder import ConfigMismatch
    from .machine import MixedMachines
    from .peers import default_peers, peer_methods
    from .runner import expand_methods, plan_runs, read_manifest
    from .spec import BenchSpec, default_drafters

    try:
        if given(ctx, "source_name") and source_names:
            raise ValueError("give --source or --sources, not both")
        config, report = command_config(ctx, BENCH_KEYS)
        options = pipeline_options(config)
        if source_names is not None:
            names = [x.strip() for x in source_names.split(",") if x.strip()]
            if not names:
                raise ValueError("--sources names no source")
        elif given(ctx, "source_name") or (report is not None and config.source is not None):  # named by the user
            names = [source_spec(config)]
            source_backend = source_backend or config.source.backend
        else:
            names = []
        if len(set(names)) != len(names):
            raise ValueError(f"--sources names a source twice: {', '.join(names)}")
        if ray_address is None and (workers or cpus_per_worker):
            raise ValueError("--workers and --cpus-per-worker need --ray")
        if methods is None:
            methods = (f"target-only,{options.method}" if report is not None
                       else ",".join([DEFAULT_METHODS, *default_peers()]))
        chosen = expand_methods(methods.split(","), peers=peer_methods())
        languages = languages or options.language
        windows = read_manifest(manifest)
        if languages:
            wanted = {x.strip() for x in languages.split(",")}
            windows = [w for w in windows if w.lang in wanted]
        windows = windows[:limit] if limit else windows
        if not windows:
            raise ValueError("no windows to run")
        sources, serial_sources = default_drafters(names)
        spec = BenchSpec(tuple(chosen), config.target.model, sources, options.decode, config.target.backend,
                         source_backend, save_traces, warmup, fault, detect_language, repeats, serial_sources,
                         options.task, options.instruction)
        spec.check_fault()
        spec.folder(out_dir).open(fresh)  # a different configuration in OUT fails here, before any model loads
        started = time.perf_counter()
        if ray_address is None:
            local = spec.build(out_dir, progress=not quiet)
            plan_runs(chosen, local.sources, local.serial_sources)  # distinct source names
        else:
            spec.check_names()
    except Exception as exc:
        _fail(exc)
    try:
        if ray_address is None:
            summary = local.run(windows)
        else:
            summary = _run_on_ray(spec, windows, out_dir, ray_address, workers, cpus_per_worker, pool_machines,
                                  not quiet)
    except (ConfigMismatch, MixedMachines) as exc:
        _fail(exc)
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "source", "pooled_e2e_tps", "e2e_ratio_vs_target_only", "e2e_slower_windows", "pooled_tps",
            "ratio_vs_target_only", "slower_windows", "windows", "exact_windows", "acceptance", "coverage",
            "median_first_publish_s", "failed_windows")}}))
    ran, wall = summary["run"]["windows_run"], time.perf_counter() - started
    click.echo(f"{ran} windows run in {wall:.1f} s ({60 * ran / wall:.2f} windows per minute, model loading "
               f"included); {len(summary['windows'])} windows in the summary")
    click.echo(f"wrote {out_dir / 'results.jsonl'}, {out_dir / 'summary.json'}, {out_dir / 'report.md'}")


def _run_on_ray(spec, windows, out_dir, address, workers, cpus_per_worker, pool_machines, progress) -> dict:
    from .distributed import RayBench, RayUnavailable, WorkerFailed, ray_cluster

    try:
        with ray_cluster(address):
            return RayBench(spec, out_dir, workers, cpus_per_worker, progress).run(windows, pool_machines=pool_machines)
    except (RayUnavailable, WorkerFailed) as exc:
        _fail(exc)


def _fail(message) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(2)
