"""Rebuild windows/ and windows.jsonl from the clips in clips.jsonl.

A window joins consecutive clips of one recording with 0.4 s of silence, so a request is long
enough for speculation to pay (the same convention as the full set under ../shared).
Run from anywhere: ``python tests/data/make_windows.py``.
"""
import json
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).parent
GAP = np.zeros(int(0.4 * 16000), np.int16)
WINDOWS = {
    "librivox_sense_en_w00": ["librivox_sense_0870", "librivox_sense_0880", "librivox_sense_0890"],
    "librivox_sense_en_w01": ["librivox_sense_0920", "librivox_sense_0930"],
    "cmu_cards_en_w00": ["cmu_cards_001", "cmu_cards_002", "cmu_cards_003"],
    "cmu_cards_en_w01": ["cmu_cards_004", "cmu_cards_005"],
}
# The quick start's clip is a window already; it lives in examples/ and is listed here as is.
EXAMPLE = {
    "id": "ljspeech_en_w00", "path": "../../examples/ljspeech_en_w00.wav", "lang": "en", "duration_s": 26.004,
    "text": "Printing, in the only sense with which we are at present concerned, differs from most if not from all "
            "the arts and crafts represented in the Exhibition in being comparatively modern. produced the block "
            "books, which were the immediate predecessors of the true printed book, the invention of movable metal "
            "letters in the middle of the fifteenth century may justly be considered as the invention of the art of "
            "printing.",
    "clips": ["LJ001-0001", "LJ001-0002", "LJ001-0004", "LJ001-0005"],
    "license": ["Public domain (LJ Speech 1.1); see examples/README.md"],
}


def main() -> None:
    clips = {row["id"]: row for row in map(json.loads, (HERE / "clips.jsonl").read_text().splitlines())}
    (HERE / "windows").mkdir(exist_ok=True)
    rows = [EXAMPLE]
    for window_id, members in WINDOWS.items():
        parts = []
        for clip_id in members:
            audio, rate = sf.read(HERE / clips[clip_id]["path"], dtype="int16")
            assert rate == 16000 and audio.ndim == 1, clip_id
            parts += [audio, GAP]
        audio = np.concatenate(parts[:-1])
        path = f"windows/{window_id}.wav"
        sf.write(HERE / path, audio, 16000, subtype="PCM_16")
        first = clips[members[0]]
        rows.append({
            "id": window_id, "path": path, "lang": first["lang"], "duration_s": round(len(audio) / 16000, 3),
            "text": " ".join(clips[c]["text"] for c in members), "clips": members,
            "license": sorted({clips[c]["license"] for c in members}),
        })
    (HERE / "windows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


if __name__ == "__main__":
    main()
