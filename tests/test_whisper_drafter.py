"""whisper-tiny.en drafter: greedy int8 decoding yields sensible English with confidences."""
from __future__ import annotations

import re

import pytest

from as2d_core.contracts import DraftJob, DraftPiece, Request, Source

from conftest import speech_audio, speech_row


@pytest.fixture(scope="module")
def source(whisper_source):
    return whisper_source


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def test_drafter_transcribes_english(source):
    audio, item = speech_audio("librivox_sense_en_w01"), speech_row("librivox_sense_en_w01")
    assert isinstance(source, Source) and source.languages == frozenset({"en"})
    job = source.prepare(Request("librivox", audio, language="en"), "en", threads=1)
    try:
        assert isinstance(job, DraftJob)
        pieces = list(job.pieces())
    finally:
        job.close()
    assert job.ended_with_eos
    assert all(isinstance(p, DraftPiece) and len(p.tokens) == 1 for p in pieces)
    assert all(0.0 < p.confidences[0] <= 1.0 for p in pieces)
    assert source.eos_token not in [p.tokens[0] for p in pieces]
    text = source.decode_text([p.tokens[0] for p in pieces])
    expected = words(item["text"])
    got = set(words(text))
    recall = sum(w in got for w in expected) / len(expected)
    assert recall >= 0.8, text
    # The drafter's ids re-encode through its own (complete) tokenizer.
    assert source.decode_text(source.encode_text(text)) == text


def test_drafter_refuses_other_languages(source):
    audio = speech_audio("librivox_sense_en_w01")
    with pytest.raises(ValueError):
        source.prepare(Request("x", audio, language="de"), "de", threads=1)
