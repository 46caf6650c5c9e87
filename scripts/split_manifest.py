"""Split a speech manifest into development and test halves for `as2d select`.

Within each language, windows alternate in manifest order (even positions to
dev, odd to test), so both halves cover every language. Paths are written
absolute so the halves can live anywhere.

    python scripts/split_manifest.py ../shared/data/speech/windows.jsonl bench-out/dev.jsonl bench-out/test.jsonl
"""
import json
import sys
from collections import defaultdict
from pathlib import Path


def split(manifest: Path, dev_path: Path, test_path: Path) -> None:
    seen: dict[str, int] = defaultdict(int)
    halves = {0: [], 1: []}
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        row["path"] = str((manifest.parent / row["path"]).resolve())
        halves[seen[row.get("lang")] % 2].append(row)
        seen[row.get("lang")] += 1
    for path, rows in ((dev_path, halves[0]), (test_path, halves[1])):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


if __name__ == "__main__":
    split(*(Path(a) for a in sys.argv[1:4]))
