"""``as2d bench MANIFEST --methods LIST --out DIR [--sources A,B] [--save-traces]`` (attached to ``as2d`` through the ``register_commands`` hook, ``as2d_bench.plugin``).

With ``--sources A,B`` every source-dependent method runs once per source: ``as2d`` with A, ``as2d@B`` with B
(likewise ``as2d-no-bc``, ``sd-k*``, ``asp``, ``as2d-no-td``); see ``runner``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .runner import METHODS

DEFAULT_SOURCE = "whisper-tiny.en"
DEFAULT_METHODS = ",".join(m for m in METHODS if not m.startswith("sd-k"))


@click.command("bench")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--methods", default=DEFAULT_METHODS, show_default=True,
              help=f"Comma-separated, from: {', '.join(METHODS)}. 'sd' runs sd-k5..sd-k8 and reports their mean.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--save-traces", is_flag=True, help="Write every window's operation trajectory to DIR/traces.jsonl.")
@click.option("--target", "target_name", default="whisper-base", show_default=True)
@click.option("--target-backend", default=None, help="Backend of the target (e.g. onnxruntime, mnn); default: the plugin's.")
@click.option("--source-backend", default=None, help="Backend of every source; default: each plugin's.")
@click.option("--source", "source_name", default=None, show_default=DEFAULT_SOURCE,
              help="The drafter (one registered source; see `as2d sources list`).")
@click.option("--sources", "source_names", default=None,
              help="Several drafters, comma-separated, instead of --source: each source-dependent method runs once "
                   "per source, named METHOD for the first and METHOD@SOURCE for the others. NAME+process runs "
                   "that source in its own process (as2d methods only; serial baselines need it in-process).")
@click.option("--budget", type=int, default=7, show_default=True)
@click.option("--publication-size", type=int, default=2, show_default=True)
@click.option("--target-threads", type=int, default=2, show_default=True)
@click.option("--shared-target-threads", type=int, default=1, show_default=True)
@click.option("--drafter-threads", type=int, default=1, show_default=True)
@click.option("--limit", type=int, default=None, help="Only the first N windows.")
@click.option("--languages", default=None, help="Only windows of these comma-separated languages.")
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="One untimed pass on the first window.")
def bench(manifest, methods, out_dir, save_traces, target_name, target_backend, source_backend, source_name,
          source_names, budget, publication_size,
          target_threads, shared_target_threads, drafter_threads, limit, languages, warmup):
    """Run METHODS on every window of MANIFEST (JSONL: id, path, lang, text) and write results to OUT."""
    from as2d_core.build import build_part, build_source
    from as2d_core.engine import DecodeOptions
    from .peers import make_peers
    from .runner import SOURCE_METHODS, Bench, expand_methods, plan_runs, read_manifest

    try:
        if source_name and source_names:
            raise ValueError("give --source or --sources, not both")
        names = [x.strip() for x in (source_names or source_name or DEFAULT_SOURCE).split(",") if x.strip()]
        if not names:
            raise ValueError("--sources names no source")
        if len(set(names)) != len(names):
            raise ValueError(f"--sources names a source twice: {', '.join(names)}")
        chosen = expand_methods(methods.split(","))
        options = DecodeOptions(budget=budget, publication_size=publication_size, target_threads=target_threads,
                                shared_target_threads=shared_target_threads, drafter_threads=drafter_threads)
        windows = read_manifest(manifest)
        if languages:
            wanted = {x.strip() for x in languages.split(",")}
            windows = [w for w in windows if w.lang in wanted]
        windows = windows[:limit] if limit else windows
        if not windows:
            raise ValueError("no windows to run")
        target = build_part("target", target_name, backend=target_backend)
        needs_source = any(m in SOURCE_METHODS for m in chosen)
        sources = [build_source(name, backend=source_backend) for name in names] if needs_source else []
        plan_runs(chosen, sources)  # distinct source names
    except Exception as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    peers = make_peers(chosen, target_threads)
    summary = Bench(target, sources, options, chosen, out_dir, save_traces, peers, warmup).run(windows)
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "source", "pooled_tps", "ratio_vs_target_only", "windows", "exact_windows", "slower_windows",
            "acceptance", "coverage", "median_first_publish_s", "failed_windows")}}))
    click.echo(f"wrote {out_dir / 'results.jsonl'}, {out_dir / 'summary.json'}, {out_dir / 'report.md'}")
