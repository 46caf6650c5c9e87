"""faster-whisper's README snippet run twice on one recording, once with ``faster_whisper`` and once with only the
import changed to ``as2d``: fp32 on the same whisper-base weights, the snippet's ``beam_size=5`` and then
``beam_size=1``, every other option at faster-whisper's default. Prints how many segments have the same words.

    .venv/bin/python examples/compare_with_faster_whisper.py RECORDING.wav
(faster-whisper reads a CTranslate2 copy of the same weights, written beside the models on first use.)
"""
import re
import sys
import time

import faster_whisper

import as2d
from as2d_whisper.peers import build_ct2_folder


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


def transcribe(library, model: str, audio: str, **options):
    whisper = library.WhisperModel(model, device="cpu", compute_type="float32", cpu_threads=2)
    start = time.perf_counter()
    segments, _info = whisper.transcribe(audio, **options)
    return [(round(s.start, 2), round(s.end, 2), s.text) for s in segments], time.perf_counter() - start


def main(audio: str) -> None:
    for options in ({"beam_size": 5}, {"beam_size": 1}):
        theirs, their_s = transcribe(faster_whisper, str(build_ct2_folder()), audio, **options)
        ours, our_s = transcribe(as2d, "base", audio, **options)
        same = sum(words(a[2]) == words(b[2]) for a, b in zip(theirs, ours))
        timed = sum(a[:2] == b[:2] for a, b in zip(theirs, ours))
        print(f"{options}: segments with the same words {same}/{max(len(theirs), len(ours))}, the same times {timed}; "
              f"faster-whisper {their_s:.1f} s, as2d {our_s:.1f} s")
        for a, b in zip(theirs, ours):
            if words(a[2]) != words(b[2]):
                print(f"  faster-whisper {a}\n  as2d           {b}")


if __name__ == "__main__":
    main(sys.argv[1])
