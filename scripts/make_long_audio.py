"""Make a long recording in one language (English unless asked) from the shared speech clips, for whole-file and
stream benchmarks.

Clips are joined in their listed order (or shuffled by a seed, for a second recording of the same
clips) with a pause between them (the pauses are what a voice-activity detector cuts at), each
brought to one speech level as a single recording would have (some FLEURS clips are recorded near
-40 dBFS, and next to a loud clip in the same window Whisper hears nothing of them), cycling through
the list again if the clips run out before the requested length. A JSON sidecar lists each clip's
start and end time and reference text, so a test or benchmark can check that every clip's words come out.

    .venv/bin/python scripts/make_long_audio.py --seconds 600 --out /tmp/long_en_600s.wav
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import av
import numpy as np

SAMPLE_RATE = 16_000
LEVEL_RMS = 0.05  # about -26 dBFS
DEFAULT_SPEECH = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "speech"


def language_clips(speech_dir: Path, language: str = "en") -> list[dict]:
    rows = [json.loads(line) for line in (speech_dir / "clips.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["lang"] == language and not r["id"].endswith("_8k")]


def build(speech_dir: Path, seconds: float, pause_s: float = 1.0, once: bool = False,
          shuffle: int | None = None, language: str = "en") -> tuple[np.ndarray, list[dict]]:
    """Samples (16 kHz mono float32) and the clip list with their times in the result (``once``: each clip once,
    up to ``seconds``, as the word-error-rate benchmark wants: no clip's words counted twice; ``shuffle``: the
    clips in the order this seed draws, so other clips share each 30 s request)."""
    from as2d_core.input.audio import load_audio

    clips = language_clips(speech_dir, language)
    if not clips:
        raise ValueError(f"no clips in {language!r} in {speech_dir / 'clips.jsonl'}")
    if shuffle is not None:
        clips = [clips[i] for i in np.random.default_rng(shuffle).permutation(len(clips))]
    pieces, listing, at = [], [], 0
    limit = int(seconds * SAMPLE_RATE)
    gap = np.zeros(int(pause_s * SAMPLE_RATE), np.float32)
    while at < limit:
        for row in clips:
            audio = level(load_audio(speech_dir / row["path"]))
            if at + audio.size > limit:
                break
            listing.append({"id": row["id"], "start_s": at / SAMPLE_RATE, "end_s": (at + audio.size) / SAMPLE_RATE,
                            "text": row["text"]})
            pieces += [audio, gap]
            at += audio.size + gap.size
        else:
            if not once:
                continue
        break
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32), listing


def level(audio: np.ndarray) -> np.ndarray:
    """Scale to ``LEVEL_RMS``, never past full scale."""
    rms = float(np.sqrt(np.mean(audio.astype(np.float64) ** 2)))
    gain = min(LEVEL_RMS / rms, 0.99 / float(np.abs(audio).max())) if rms > 0 else 1.0
    return (audio * gain).astype(np.float32)


def write_wav(path: Path, samples: np.ndarray) -> None:
    """16-bit PCM WAV through PyAV."""
    with av.open(str(path), "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=SAMPLE_RATE)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1).astype(np.float32), format="fltp", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--pause-s", type=float, default=1.0)
    parser.add_argument("--speech", type=Path, default=DEFAULT_SPEECH, help="the shared speech folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--once", action="store_true", help="use each clip at most once (for word error rates)")
    parser.add_argument("--shuffle", type=int, metavar="SEED", help="the clips in the order this seed draws")
    parser.add_argument("--lang", default="en", help="the clips' language (the shared set's codes: en, de, es, ...)")
    args = parser.parse_args()
    if not (args.speech / "clips.jsonl").exists():
        parser.error(f"no clips.jsonl in {args.speech}")
    try:
        samples, listing = build(args.speech, args.seconds, args.pause_s, args.once, args.shuffle, args.lang)
    except ValueError as exc:
        parser.error(str(exc))
    write_wav(args.out, samples)
    args.out.with_suffix(".json").write_text(json.dumps(listing, indent=1, ensure_ascii=False))
    print(f"{args.out}: {samples.size / SAMPLE_RATE:.1f} s from {len(listing)} clips "
          f"({len({c['id'] for c in listing})} distinct); clip times in {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
