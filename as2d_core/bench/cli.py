"""``as2d bench MANIFEST --methods LIST --out DIR [--save-traces]`` (attached to the ``as2d`` group by the core)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .runner import METHODS

DEFAULT_METHODS = ",".join(m for m in METHODS if not m.startswith("sd-k"))


@click.command("bench")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--methods", default=DEFAULT_METHODS, show_default=True,
              help=f"Comma-separated, from: {', '.join(METHODS)}. 'sd' runs sd-k5..sd-k8 and reports their mean.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--save-traces", is_flag=True, help="Write every window's operation trajectory to DIR/traces.jsonl.")
@click.option("--target", "target_name", default="whisper-base", show_default=True)
@click.option("--source", "source_name", default="whisper-tiny.en", show_default=True)
@click.option("--budget", type=int, default=7, show_default=True)
@click.option("--publication-size", type=int, default=8, show_default=True)
@click.option("--target-threads", type=int, default=2, show_default=True)
@click.option("--shared-target-threads", type=int, default=1, show_default=True)
@click.option("--drafter-threads", type=int, default=1, show_default=True)
@click.option("--limit", type=int, default=None, help="Only the first N windows.")
@click.option("--languages", default=None, help="Only windows of these comma-separated languages.")
@click.option("--warmup/--no-warmup", default=True, show_default=True, help="One untimed pass on the first window.")
def bench(manifest, methods, out_dir, save_traces, target_name, source_name, budget, publication_size,
          target_threads, shared_target_threads, drafter_threads, limit, languages, warmup):
    """Run METHODS on every window of MANIFEST (JSONL: id, path, lang, text) and write results to OUT."""
    from ..cli import build_part
    from ..engine import DecodeOptions
    from .peers import make_peers
    from .runner import PEERS, Bench, expand_methods, read_manifest

    try:
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
        target = build_part("target", target_name)
        needs_source = any(m not in ("target-only", *PEERS) for m in chosen)
        source = build_part("source", source_name) if needs_source else None
    except Exception as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    peers = make_peers(chosen, target_threads)
    summary = Bench(target, source, options, chosen, out_dir, save_traces, peers, warmup).run(windows)
    for name, s in summary["methods"].items():
        click.echo(json.dumps({"method": name, **{k: s.get(k) for k in (
            "pooled_tps", "ratio_vs_target_only", "windows", "exact_windows", "slower_windows", "failed_windows")}}))
    click.echo(f"wrote {out_dir / 'results.jsonl'}, {out_dir / 'summary.json'}, {out_dir / 'report.md'}")
