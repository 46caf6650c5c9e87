"""Subtitle cues as players show them: at most 2 lines of 42 characters, long segments split by time.

The real test decodes the bundled clip with whisper-base (timestamp mode, words timed) and checks the
cues ``as2d run --format srt`` writes; the rules are also checked on made-up segments, with and without words.
"""
from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import srt

from as2d_core.cli.subtitles import MAX_CHARS, MAX_LINES, split_cue, to_srt, transcript_cues, wrap
from as2d_core.capabilities import Word
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.decode.options import DecodeOptions

BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"
LONG = ("Printing, in the only sense with which we are at present concerned, differs from most if not from all "
        "the arts and crafts represented in the exhibition")


def _fits(text: str) -> bool:
    lines = text.split("\n")
    return len(lines) <= MAX_LINES and all(0 < len(line) <= MAX_CHARS for line in lines)


def test_wrap_balances_two_lines_and_refuses_what_does_not_fit():
    assert wrap("a short line") == "a short line"
    two = wrap("Printing, in the only sense with which we are at present concerned")
    assert _fits(two) and two.replace("\n", " ") == "Printing, in the only sense with which we are at present concerned"
    top, bottom = two.split("\n")
    assert abs(len(top) - len(bottom)) < 12  # balanced, not 42 then the rest
    assert wrap(LONG) is None


def test_a_long_segment_without_words_is_shared_by_characters():
    cues = split_cue(10.0, 20.0, LONG)
    assert len(cues) > 1 and all(_fits(text) for _, _, text in cues)
    assert " ".join(text.replace("\n", " ") for _, _, text in cues) == LONG
    assert cues[0][0] == 10.0 and cues[-1][1] == pytest.approx(20.0)
    assert all(a[1] == pytest.approx(b[0]) for a, b in zip(cues, cues[1:]))  # contiguous
    first = cues[0][2].replace("\n", " ")
    assert cues[0][1] - 10.0 == pytest.approx(10.0 * len(first.replace(" ", "")) / len(LONG.replace(" ", "")))


def test_a_long_segment_with_words_is_cut_at_word_times():
    words = [Word(f" {w}", 10.0 + i, 10.5 + i, 0.9) for i, w in enumerate(LONG.split())]
    cues = split_cue(9.8, 40.0, LONG, words)
    assert len(cues) > 1 and all(_fits(text) for _, _, text in cues)
    starts = {w.start_s for w in words}
    assert cues[0][0] == 9.8 and cues[-1][1] == 40.0
    assert all(a in starts for a, _, _ in cues[1:]) and all(b - 0.5 in starts for _, b, _ in cues[:-1])


@pytest.fixture(scope="module")
def transcript(whisper_target):
    options = PipelineOptions(method="target-only", language="en",
                              decode=DecodeOptions(timestamps="segment", word_timestamps=True))
    return build_pipeline(whisper_target, None, options, detector=None).transcribe(BUNDLED)


def test_real_cues_fit_keep_the_text_and_stay_in_their_segments(transcript):
    long = [s for s in transcript.segments if wrap(s.text) is None]
    assert long, "the clip has segments too long for one cue: the splitting is exercised"
    cues = transcript_cues(transcript)
    assert len(cues) > len(transcript.segments) and all(_fits(text) for _, _, text in cues)
    assert " ".join(text.replace("\n", " ") for _, _, text in cues) == " ".join(transcript.text.split())
    assert all(a <= b <= c for (a, b, _), (c, _, _) in zip(cues, cues[1:]))  # in order, never overlapping
    words = {w.start_s for w in transcript.windows[0].result.words}
    inner = [a for a, _, _ in cues if all(a != s.start_s for s in transcript.segments)]
    assert inner and all(a in words for a in inner)  # cut at word times
    parsed = list(srt.parse(to_srt(cues)))
    assert [p.content for p in parsed] == [text for _, _, text in cues]


def test_without_words_the_real_cues_still_fit(transcript):
    plain = attrs.evolve(transcript, windows=[attrs.evolve(w, result=attrs.evolve(w.result, words=[]))
                                              for w in transcript.windows])
    cues = transcript_cues(plain)
    assert len(cues) > len(transcript.segments) and all(_fits(text) for _, _, text in cues)
    assert cues[-1][1] == transcript.segments[-1].end_s
