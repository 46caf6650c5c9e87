"""as2d's ``BatchedInferencePipeline`` against faster-whisper's, call by call, as a switching user runs them.

Each row is one ``transcribe`` call with the same options on both (``beam_size`` given alike: faster-whisper's
batched default is 5, as2d's 1), on the same fp32 whisper-base weights; it prints SAME when the segments have the
same text and times (and words with their times where asked), else the first segment that differs::

    .venv/bin/python examples/compare_batched_with_faster_whisper.py bench-out/long_once.wav

``--time BEAM`` times faster-whisper's README batched snippet instead (``batch_size=8``, the language detected,
``beam_size=BEAM``) on both, ``--rounds`` rounds alternating which runs first, and prints each wall, the medians,
their ratio and whether the segments are the same (CTranslate2 spins on its threads: run it on idle cores);
``--compute-type int8`` times both at int8, where the two runtimes' int8 arithmetic differs and so may a few words::

    .venv/bin/python examples/compare_batched_with_faster_whisper.py bench-out/long_once.wav --time 5

Needs faster-whisper (``pip install 'as2d[bench]'``) and the installed models (``as2d models install``).
"""
from __future__ import annotations

import argparse
import statistics
import time

CALLS = [
    dict(batch_size=16, language="en"),
    dict(batch_size=8),  # the language detected
    dict(batch_size=8, language="en", without_timestamps=False),
    dict(batch_size=4, language="en", word_timestamps=True),
    dict(batch_size=8, language="en", word_timestamps=True, beam_size=5),
    dict(batch_size=8, language="en", beam_size=5),
    dict(batch_size=8, language="en", initial_prompt="Zoom meeting."),
    dict(batch_size=8, language="en", hotwords="Zoom"),
    dict(batch_size=8, language="en", chunk_length=15),
    dict(batch_size=8, language="en", vad_parameters=dict(min_silence_duration_ms=500, speech_pad_ms=200)),
    dict(batch_size=8, language="en", vad_filter=False,
         clip_timestamps=[{"start": 0.0, "end": 25.0}, {"start": 30.0, "end": 58.0}]),
]


def segments(pipeline, audio, options: dict) -> tuple[list, str]:
    found, info = pipeline.transcribe(audio, **options)
    return [(round(float(s.start), 2), round(float(s.end), 2), s.text,
             [(w.word, round(float(w.start), 2), round(float(w.end), 2)) for w in s.words or []])
            for s in found], info.language


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("audio")
    parser.add_argument("--seconds", type=float, default=None, help="only the audio's first seconds")
    parser.add_argument("--time", type=int, default=None, metavar="BEAM", help="time the README batched snippet")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compute-type", default="float32", choices=("float32", "int8"))
    args = parser.parse_args()

    from faster_whisper import BatchedInferencePipeline as TheirBatched
    from faster_whisper import WhisperModel as TheirModel
    from faster_whisper import decode_audio

    import as2d
    from as2d_core.setup.paths import models_dir

    audio = decode_audio(args.audio)
    audio = audio if args.seconds is None else audio[: int(args.seconds * 16_000)]
    theirs = TheirBatched(TheirModel(str(models_dir() / "ct2-whisper-base"), compute_type=args.compute_type))
    ours = as2d.BatchedInferencePipeline(as2d.WhisperModel("base", compute_type=args.compute_type))
    if args.time is not None:
        return timed(ours, theirs, audio, args.time, args.rounds)
    same = 0
    for options in CALLS:
        options = {"beam_size": 1, **options}
        mine, their = segments(ours, audio, options), segments(theirs, audio, options)
        same += mine == their
        print("SAME" if mine == their else "DIFF", options, f"{len(their[0])} segments")
        for a, b in zip(their[0], mine[0]):
            if a != b:
                print("   faster-whisper", str(a)[:200], "\n   as2d          ", str(b)[:200])
                break
    print(f"{same} of {len(CALLS)} calls the same")


def timed(ours, theirs, audio, beam_size: int, rounds: int) -> None:
    """The README batched snippet on both, ``rounds`` times, alternating which runs first."""
    walls: dict[str, list[float]] = {"faster-whisper": [], "as2d": []}
    found = {}
    for round_ in range(rounds):
        pair = [("faster-whisper", theirs), ("as2d", ours)]
        for name, pipeline in pair if round_ % 2 == 0 else pair[::-1]:
            start = time.perf_counter()
            found[name] = segments(pipeline, audio, dict(batch_size=8, beam_size=beam_size))
            walls[name].append(round(time.perf_counter() - start, 2))
    medians = {name: statistics.median(w) for name, w in walls.items()}
    same = sum(a == b for a, b in zip(found["faster-whisper"][0], found["as2d"][0]))
    print(f"beam_size={beam_size}: faster-whisper {walls['faster-whisper']}, as2d {walls['as2d']} (s); medians "
          f"{medians['faster-whisper']:.2f} and {medians['as2d']:.2f} s, "
          f"{medians['faster-whisper'] / medians['as2d']:.2f}x; {same} of {len(found['faster-whisper'][0])} "
          "segments the same")


if __name__ == "__main__":
    main()
