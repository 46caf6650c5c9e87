"""Where two systems' word errors differ on a recording: the reference stretches that make up a WER gap.

Reads the rows of a ``scripts/bench_long_audio.py --out`` file (the first round of each method) and the
recording's reference (the clips' ``.json`` that ``scripts/make_long_audio.py`` writes beside the audio),
aligns each system's text to the reference as the word error rate does (jiwer, the same normalization), and
prints every stretch of reference words where the systems make a different number of errors, with what each
wrote there (``=`` right, ``-`` deleted, ``~`` part of the substitution before it, ``+w`` inserted after), then
each system's errors summed over those stretches. A gap made of one lost sentence reads differently from one
made of many single-word choices.

    .venv/bin/python scripts/where_words_go.py bench-out/n/default-r1.jsonl bench-out/long_once.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import jiwer
from bench_long_audio import normalized


def per_reference_word(reference: list[str], hypothesis: str) -> tuple[list[str], dict[int, str]]:
    """What the hypothesis has at each reference word, and the words it inserts before each (by index)."""
    out = jiwer.process_words(" ".join(reference), normalized(hypothesis) or "-")
    words, marks, inserted = out.hypotheses[0], [], {}
    for chunk in out.alignments[0]:
        said = " ".join(words[chunk.hyp_start_idx:chunk.hyp_end_idx])
        if chunk.type == "insert":
            inserted[chunk.ref_start_idx] = said
            continue
        for k in range(chunk.ref_start_idx, chunk.ref_end_idx):
            first = k == chunk.ref_start_idx
            marks.append({"equal": "=", "delete": "-"}.get(chunk.type, said if first else "~"))
    return marks, inserted


def errors_at(marks: list[str], inserted: dict[int, str], k: int) -> int:
    return (marks[k] != "=") + (k in inserted)


def differing_stretches(marks: list[tuple[list[str], dict[int, str]]]) -> list[tuple[int, int]]:
    """Maximal runs of reference words where some system errs, kept where the systems' error counts differ."""
    stretches, k, n = [], 0, len(marks[0][0])
    while k < n:
        if not any(errors_at(m, ins, k) for m, ins in marks):
            k += 1
            continue
        end = k
        while end < n and any(errors_at(m, ins, end) for m, ins in marks):
            end += 1
        if len({sum(errors_at(m, ins, j) for j in range(k, end)) for m, ins in marks}) > 1:
            stretches.append((k, end))
        k = end
    return stretches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", type=Path, help="a bench_long_audio.py --out file")
    parser.add_argument("reference", type=Path, help="the recording's clips (.json beside it)")
    args = parser.parse_args()
    reference = normalized(" ".join(clip["text"] for clip in json.loads(args.reference.read_text()))).split()
    rows: dict[str, dict] = {}
    for line in args.rows.read_text().splitlines():
        if line.strip().startswith("{"):
            row = json.loads(line)
            rows.setdefault(row["method"], row)
    names = list(rows)
    marks = [per_reference_word(reference, rows[name]["text"]) for name in names]
    totals = dict.fromkeys(names, 0)
    width = max(map(len, names))
    for start, end in differing_stretches(marks):
        print(f"reference words {start}-{end}: {' '.join(reference[start:end])!r}")
        for name, (m, ins) in zip(names, marks):
            errors = sum(errors_at(m, ins, j) for j in range(start, end))
            totals[name] += errors
            wrote = " | ".join(m[j] + (f" +{ins[j]}" if j in ins else "") for j in range(start, end))
            print(f"    {name:<{width}}  {errors} errors: {wrote}")
    print(f"\n{len(reference)} reference words; errors where the systems differ: "
          + ", ".join(f"{name} {count}" for name, count in totals.items()))


if __name__ == "__main__":
    main()
