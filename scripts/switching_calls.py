"""A switching user's calls on both libraries: faster-whisper's own calls, only the import changed, compared.

For each call, the same keyword arguments go to ``faster_whisper`` and to ``as2d`` (fp32, whisper-base) on one
recording made by ``make_long_audio.py``; the script prints how many segments each gives, how many have the
same words and the same times (within 10 ms), whether the whole transcripts are the same words, each one's wall
clock, and, where the call decodes the whole recording, each one's word error rate against the clips' texts.
The calls: the sequential ``transcribe`` with ``clip_timestamps`` (greedy without conditioning, and faster-
whisper's default beam 5 with conditioning), and the batched pipeline given each clip of the recording's
sidecar as ``clip_timestamps`` (a user's own segmentation). With ``--server`` the OpenAI client also asks an
``as2d serve`` started here for beam 5 and ``vad_filter`` in ``extra_body``, against faster-whisper's
``transcribe`` at the server's settings. Each call runs once (a single wall clock: this measures parity).

    .venv/bin/python scripts/make_long_audio.py --seconds 400 --once --out bench-out/long_once.wav
    .venv/bin/python scripts/switching_calls.py bench-out/long_once.wav --server
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from scripts.bench_long_audio import normalized, word_errors

SAME_TIME_S = 0.011


def compare(name: str, ours: list, theirs: list, ours_s: float, theirs_s: float, reference: str | None) -> dict:
    """One call's line: segments, same words, same times, the whole transcript, walls and word error rates."""
    same = sum(normalized(a.text) == normalized(b.text) for a, b in zip(ours, theirs))
    times = sum(abs(a.start - b.start) < SAME_TIME_S and abs(a.end - b.end) < SAME_TIME_S for a, b in zip(ours, theirs))
    whole = [" ".join(s.text for s in side) for side in (ours, theirs)]
    row = {"call": name, "segments": [len(ours), len(theirs)], "same_words": same, "same_times": times,
           "whole_transcript_same": normalized(whole[0]) == normalized(whole[1]),
           "wall_s": {"as2d": round(ours_s, 2), "faster-whisper": round(theirs_s, 2)}}
    if reference is not None:
        row["wer"] = {"as2d": word_errors(whole[0], reference)["wer"], "faster-whisper": word_errors(whole[1],
                                                                                                  reference)["wer"]}
    print(json.dumps(row), flush=True)
    return row


def timed(call) -> tuple[list, float]:
    start = time.perf_counter()
    segments = list(call()[0])
    return segments, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", type=Path, help="a recording from make_long_audio.py (its .json sidecar beside it)")
    parser.add_argument("--server", action="store_true", help="also the OpenAI client against as2d serve")
    args = parser.parse_args()
    import soundfile
    from as2d_whisper.word_check import faster_whisper_model
    from faster_whisper import BatchedInferencePipeline as TheirBatched

    from as2d import BatchedInferencePipeline, WhisperModel

    audio, rate = soundfile.read(args.audio, dtype="float32")
    clips = json.loads(args.audio.with_suffix(".json").read_text())
    reference = " ".join(c["text"] for c in clips)
    fw, ours = faster_whisper_model(), WhisperModel("base", device="cpu", compute_type="float32")
    spans = [t for c in clips[1::3] for t in (c["start_s"], c["end_s"])]  # every third clip, as a user's clips
    for name, options in (
            ("clip_timestamps, greedy, no conditioning",
             {"clip_timestamps": spans, "beam_size": 1, "condition_on_previous_text": False}),
            ("clip_timestamps, beam 5 with conditioning (faster-whisper's default call)",
             {"clip_timestamps": spans, "beam_size": 5})):
        a, a_s = timed(lambda: ours.transcribe(audio, language="en", **options))
        b, b_s = timed(lambda: fw.transcribe(audio, language="en", **options))
        compare(name, a, b, a_s, b_s, None)
    dicts = [{"start": c["start_s"], "end": c["end_s"]} for c in clips]
    a, a_s = timed(lambda: BatchedInferencePipeline(ours).transcribe(audio, language="en", clip_timestamps=dicts))
    b, b_s = timed(lambda: TheirBatched(fw).transcribe(audio, language="en", beam_size=1, clip_timestamps=dicts))
    compare("batched, each clip of the sidecar one clip_timestamps entry (greedy)", a, b, a_s, b_s, reference)
    if args.server:
        serve_call(args.audio, audio, fw, reference)


def serve_call(path: Path, audio: np.ndarray, fw, reference: str) -> None:
    """The OpenAI client with faster-whisper's options in ``extra_body``, against faster-whisper's ``transcribe``
    at the server's settings (its defaults but as2d's: beam 5 asked, conditioning off, as ``as2d serve``'s)."""
    from openai import OpenAI

    from as2d_serve.launch import ServerProcess

    server = ServerProcess(start_timeout_s=600, request_timeout_s=1800)
    try:
        client = OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=1800)
        start = time.perf_counter()
        with path.open("rb") as f:
            served = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json",
                                                        language="en",
                                                        extra_body={"beam_size": 5, "vad_filter": True})
        a_s = time.perf_counter() - start
    finally:
        server.stop()
    b, b_s = timed(lambda: fw.transcribe(audio, language="en", beam_size=5, vad_filter=True,
                                         condition_on_previous_text=False))
    compare("OpenAI client, extra_body beam_size=5 vad_filter=True (server: conditioning off)", served.segments, b,
            a_s, b_s, reference)


if __name__ == "__main__":
    main()
