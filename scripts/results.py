"""The README's results at a glance: one table and one plot from benchmark runs, speed beside accuracy.

Reads the JSON lines that ``scripts/bench_long_audio.py --out`` (whole recordings, each row with its word error
rate) and ``as2d bench --out`` (short requests: ``results.jsonl`` in the folder) write, and prints a Markdown
table: for each system, precision and setting, the median over rounds of its wall clock, its speed in tokens per
second (the tokens of its text under whisper-base's tokenizer, so every system is counted alike), its ratio to
target-only in the same run, and its word error rate. ``--plot`` draws tokens per second against word error rate.

    .venv/bin/python scripts/results.py --long /tmp/q-greedy.jsonl /tmp/q-beam5.jsonl /tmp/q-batched.jsonl \\
        --short /tmp/short-fp32 --manifest bench-out/dev.jsonl --plot docs/results.png > /tmp/results.md
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from bench_long_audio import normalized, word_errors

from as2d_core.setup.paths import models_dir


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip().startswith("{")]


def _precision(row: dict) -> str:
    name = f"{row['method']} {row.get('target') or ''}"
    return "int8" if "int8" in name else "fp32"


def _system(method: str) -> str:
    return method.removesuffix("-int8")


def long_rows(paths: list[Path], count_tokens) -> list[dict]:
    """One row per (system, precision, setting): medians over the rounds of each file."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for path in paths:
        for row in _rows(path):
            groups[(_system(row["method"]), _precision(row), _setting(row, path))].append(row)
    out = []
    for (system, precision, setting), runs in groups.items():
        base = [r for r in _rows_of(groups, "target-only", precision, setting)]
        wall = statistics.median(r["wall_s"] for r in runs)
        tokens = count_tokens(runs[0]["text"])
        out.append({"job": "whole file", "system": system, "precision": precision, "setting": setting,
                    "wall_s": wall, "tps": tokens / wall, "rtf": wall / runs[0]["audio_s"],
                    "vs_target_only": statistics.median(r["wall_s"] for r in base) / wall if base else None,
                    "wer": runs[0].get("wer"), "exact": _exact(r.get("exact") for r in runs)})
    return out


def _exact(checks) -> bool | None:
    """True if every round was checked and equal, False if any differed, None if none was checked."""
    checks = [c for c in checks if c is not None]
    return (all(checks) if checks else None)


def _setting(row: dict, path: Path) -> str:
    if _system(row["method"]) == "faster-whisper-call":  # every option at faster-whisper's default
        return "its default call"
    return row.get("setting", path.stem)


def _rows_of(groups: dict, system: str, precision: str, setting: str) -> list[dict]:
    return groups.get((system, precision, setting), [])


def short_rows(folders: list[Path], manifest: Path, count_tokens) -> list[dict]:
    """One row per (method, precision) of ``as2d bench`` runs: summed over the windows, end to end."""
    truth = {row["id"]: row["text"] for row in _rows(manifest)}
    out = []
    for folder in folders:
        by_method: dict[str, list[dict]] = defaultdict(list)
        for row in _rows(folder / "results.jsonl"):
            if row.get("text") is not None and row["window"] in truth and not row.get("derived"):
                by_method[row["method"]].append(row)
        base = sum(r["e2e_s"] for r in by_method.get("target-only", []))
        for method, runs in by_method.items():
            e2e = sum(r["e2e_s"] for r in runs)
            hypothesis = " ".join(r["text"] for r in runs)
            reference = " ".join(truth[r["window"]] for r in runs)
            out.append({"job": f"short requests ({len(runs)})", "system": _system(method),
                        "precision": _precision({"method": method, "target": folder.name}), "setting": f"run {folder.name}",
                        "wall_s": e2e, "tps": sum(count_tokens(r["text"]) for r in runs) / e2e, "rtf": None,
                        "vs_target_only": base / e2e if base else None,
                        "wer": word_errors(hypothesis, reference)["wer"], "exact": _exact(r["exact"] for r in runs)})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| job | system | precision | setting | wall (s) | tokens/s | vs target-only | WER | exact |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["job"], r["setting"], r["precision"], -r["tps"])):
        ratio = f"{r['vs_target_only']:.2f}x" if r["vs_target_only"] else "-"
        wer = f"{100 * r['wer']:.2f}%" if r["wer"] is not None else "-"
        ours = _family(r["system"])[0] != "peers"  # a peer's tokens may differ from our target's: not a fault
        exact = {True: "yes", False: "**NO**", None: "-"}[r["exact"] if ours else None]
        lines.append(f"| {r['job']} | {r['system']} | {r['precision']} | {r['setting']} | {r['wall_s']:.2f} | "
                     f"{r['tps']:.1f} | {ratio} | {wer} | {exact} |")
    return "\n".join(lines)


def _family(system: str) -> tuple[str, str]:
    """A system's colour: as2d's methods, our target alone, or a peer."""
    if system.startswith("as2d"):
        return "as2d", "C0"
    return ("target-only", "C2") if system.startswith("target-only") else ("peers", "C1")


def plot(rows: list[dict], path: Path) -> None:
    """One panel per precision; colour by family, marker by setting, each point named by its system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["wer"] is not None]
    precisions = sorted({r["precision"] for r in rows})
    kind = {id(r): r["setting"] if r["job"] == "whole file" else "short requests" for r in rows}
    settings = sorted(set(kind.values()))
    markers = dict(zip(settings, "os^Dvx*P"))
    figure, axes = plt.subplots(1, len(precisions), figsize=(6 * len(precisions), 5), sharey=True, squeeze=False)
    for axis, precision in zip(axes[0], precisions):
        for r in (r for r in rows if r["precision"] == precision):
            _, colour = _family(r["system"])
            axis.scatter(r["tps"], 100 * r["wer"], marker=markers[kind[id(r)]], color=colour, s=45)
            axis.annotate(r["system"].replace("faster-whisper", "fw"), (r["tps"], 100 * r["wer"]), fontsize=7,
                          xytext=(4, 3), textcoords="offset points")
        axis.set_title(f"{precision}")
        axis.set_xlabel("tokens per second (higher is faster)")
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("word error rate, % (lower is better)")
    handles = [plt.Line2D([], [], color=c, marker="o", linestyle="", label=f)
               for f, c in (("as2d", "C0"), ("target-only", "C2"), ("peers", "C1"))]
    handles += [plt.Line2D([], [], color="grey", marker=m, linestyle="", label=s) for s, m in markers.items()]
    figure.legend(handles=handles, loc="lower center", ncol=(len(handles) + 1) // 2, fontsize=8, frameon=False)
    figure.suptitle("Whole files and short requests on 2 CPU cores, whisper-base")
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=Path, nargs="*", default=[], help="bench_long_audio.py --out files")
    parser.add_argument("--short", type=Path, nargs="*", default=[], help="as2d bench --out folders")
    parser.add_argument("--manifest", type=Path, help="the windows' manifest of the --short runs (their texts)")
    parser.add_argument("--plot", type=Path, default=None, help="also draw tokens/s against WER here (PNG)")
    args = parser.parse_args(argv)
    if args.short and args.manifest is None:
        parser.error("--short needs --manifest (the windows' reference texts)")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(models_dir() / "whisper-base" / "tokenizer.json"))

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text.strip(), add_special_tokens=False).ids) if normalized(text) else 0

    rows = long_rows(args.long, count_tokens) + (short_rows(args.short, args.manifest, count_tokens)
                                                 if args.short else [])
    print(table(rows))
    if args.plot is not None:
        plot(rows, args.plot)
        print(f"\n![tokens per second against word error rate]({args.plot})")


if __name__ == "__main__":
    main()
