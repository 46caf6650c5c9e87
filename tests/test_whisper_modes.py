"""Whisper's modes on real speech: timestamps, prompts and translation, exact against target-only in each.

Real models (whisper-base target; the tiny.en drafters on ONNX Runtime and CTranslate2) on a few
real windows: as2d's tokens equal target-only's in timestamp mode and with a prompt, hotwords and
previous text; the drafters get the same prompt and draft timestamps; a task the drafter cannot
draft runs target-only and says so; bad input is refused in one line. Long files (conditioning on
previous text, subtitles) are in ``test_long_audio.py``.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.cli.main import cli
from as2d_core.setup.catalog import resolve_bridge
from conftest import speech_audio
from drafting import options_that_draft

BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"
# the bundled 26 s window (five segments, three drafter chunks), a short one, and one of the shared set
WINDOWS = ["ljspeech_en_w00", "cmu_cards_en_w00", "jfk_en_w00"]


@pytest.fixture(scope="module")
def drafters(whisper_source, whisper_ct2_source):
    return {"onnx": whisper_source, "ct2": whisper_ct2_source}


@pytest.mark.parametrize("item_id", WINDOWS)
def test_timestamp_mode_is_exact_with_both_drafters(whisper_target, drafters, item_id):
    request = Request(item_id, speech_audio(item_id), language="en", timestamps="segment")
    reference = run_request(request, whisper_target, None, "target-only")
    begin = whisper_target.model.timestamp_begin
    stamps = [t for t in reference.tokens if t >= begin]
    assert reference.tokens[0] == begin or reference.tokens[0] - begin <= 50  # the first one at most 1 s in
    assert stamps == sorted(stamps) and len(stamps) >= 2
    segments = reference.segments
    assert segments and all(0 <= s.start_s <= s.end_s <= request.duration_s for s in segments)
    assert all(a.end_s <= b.start_s for a, b in zip(segments, segments[1:]))
    assert "".join(s.text for s in segments) == reference.text
    for name, source in drafters.items():
        result = run_request(request, whisper_target, source, "as2d", options_that_draft(),
                             bridge=resolve_bridge(source, whisper_target))
        assert result.tokens == reference.tokens, f"{item_id} {name}: {result.text!r} != {reference.text!r}"
        assert result.producer_error is None and result.source == source.name
        assert [s.tokens for s in result.segments] == [s.tokens for s in segments]


def test_the_drafters_draft_timestamps_from_the_request_start(drafters):
    """The CTranslate2 drafter's later chunks count their timestamps from the request's start too."""
    request = Request("ts", speech_audio("ljspeech_en_w00"), language="en", timestamps="segment")
    for name, source in drafters.items():
        job = source.prepare(request, "en", 1)
        try:
            tokens = [t for piece in job.pieces() for t in piece.tokens]
        finally:
            job.close()
        begin = source.timestamp_begin
        seconds = [(t - begin) * source.time_precision_s for t in tokens if t >= begin]
        assert tokens[0] >= source.timestamp_begin and len(seconds) >= 4, name
        assert seconds == sorted(seconds) and 20 < seconds[-1] <= 27, (name, seconds)


def _between_prev_and_start(prompt, part):
    """The text a decoder prompt gives between <|startofprev|> and <|startoftranscript|>."""
    return part.decode_text(prompt[prompt.index(part.special["sot_prev"]) + 1 : prompt.index(part.sot)])


def test_prompt_hotwords_and_previous_text_reach_target_and_drafters_and_stay_exact(whisper_target, drafters):
    request = Request("prompted", speech_audio("cmu_cards_en_w00"), language="en", prompt="Ten of clubs. Four queen.",
                      hotwords="spades hearts", previous_text="Five of spades.")
    session = whisper_target.prepare(request, 1)
    try:
        model = whisper_target.model
        assert session.prompt[0] == model.special["sot_prev"] and session.prompt[-1] == model.no_timestamps
        said = _between_prev_and_start(session.prompt, model)
        assert said == " spades hearts Ten of clubs. Four queen. Five of spades."
    finally:
        session.close()
    jobs = {name: source.prepare(request, "en", 1) for name, source in drafters.items()}
    for name, job in jobs.items():
        try:
            vocabulary = drafters[name].model if name == "onnx" else drafters[name]
            assert _between_prev_and_start(job.prompt, vocabulary) == said, name  # the drafter's prompt is the same
        finally:
            job.close()
    for timestamps in ("none", "segment"):
        asked = Request(request.request_id, request.audio, language="en", prompt=request.prompt,
                        hotwords=request.hotwords, previous_text=request.previous_text, timestamps=timestamps)
        reference = run_request(asked, whisper_target, None, "target-only")
        for name, source in drafters.items():
            result = run_request(asked, whisper_target, source, "as2d", options_that_draft(),
                                 bridge=resolve_bridge(source, whisper_target))
            assert result.tokens == reference.tokens, (timestamps, name, result.text, reference.text)


def test_a_prompt_over_whispers_limit_is_refused_and_earlier_text_is_cut_as_whisper_cuts_it(whisper_target):
    audio = speech_audio("cmu_cards_en_w00")
    with pytest.raises(ValueError, match=r"the prompt is 300 tokens; whisper-base takes at most 223 \(Whisper's limit"):
        whisper_target.prepare(Request("long", audio, language="en", prompt=" one" * 300), 1)
    with pytest.raises(ValueError, match="the hotwords is 250 tokens"):
        whisper_target.prepare(Request("long", audio, language="en", hotwords=" two" * 250), 1)
    session = whisper_target.prepare(Request("kept", audio, language="en", prompt=" one" * 100,
                                             previous_text=" two" * 200 + " three"), 1)
    try:  # the earlier windows' text keeps its last 223 tokens, as Whisper keeps them
        said = _between_prev_and_start(session.prompt, whisper_target.model).split()
        assert len(said) == 223 and said[-1] == "three" and said[0] == "one" and said.count("one") == 22
    finally:
        session.close()


def test_translation_runs_target_only_and_says_so(whisper_target, whisper_ct2_source):
    request = Request("translate", speech_audio("fleurs_de_w00"), task="translate", timestamps="segment")
    reference = run_request(request, whisper_target, None, "target-only")
    result = run_request(request, whisper_target, whisper_ct2_source, "as2d",
                         bridge=resolve_bridge(whisper_ct2_source, whisper_target))
    assert result.tokens == reference.tokens and result.source is None and result.verify_calls == 0
    assert result.language == "de" and "does not draft the task 'translate'" in result.note
    transcribed = run_request(Request("de", request.audio), whisper_target, None, "target-only")
    assert result.text != transcribed.text and sum(w in result.text.lower().split() for w in ("the", "and", "of")) >= 2


def test_bad_modes_exit_2_in_one_line():
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(BUNDLED), "--task", "sing"])
    assert result.exit_code == 2 and "Invalid value for '--task': 'sing' is not one of 'asr', 'translate', 'qa'" in (
        result.output)
    result = runner.invoke(cli, ["run", str(BUNDLED), "--timestamps", "word"])
    assert result.exit_code == 2 and "Invalid value for '--timestamps'" in result.output
    result = runner.invoke(cli, ["run", str(BUNDLED), "--method", "target-only", "--language", "en",
                                 "--prompt", "one " * 300])
    assert result.exit_code == 2 and result.output == (
        "Error: the prompt is 300 tokens; whisper-base takes at most 223 (Whisper's limit: half its 448-token "
        "context, less one)\n")
