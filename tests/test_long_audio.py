"""Whole files and streams with the real Whisper pair on real speech: exact per window and per block.

A 2-minute recording is built from the shared clips (``scripts/make_long_audio.py``), so these
tests skip when ``../shared`` is absent; the format and CLI tests use the bundled clip.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import attrs
import numpy as np
import pytest
import soundfile
import srt
import webvtt
from click.testing import CliRunner

from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.input.audio import load_audio
from as2d_core.cli.main import cli
from as2d_core.setup.build import DEFAULT_SOURCE
from as2d_core.decode.lookahead import LookaheadSource
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline, pipeline_from_config
from as2d_core.cli.subtitles import to_srt, to_vtt
from as2d_core.decode.timestamps import marked_up
from audio_files import encode
from conftest import SHARED_SPEECH, full_only, script_module
from drafting import options_that_draft

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "examples" / "ljspeech_en_w00.wav"
SR = 16000
WINDOWS = options_that_draft(route="windows")  # these tests are about the windows route (VAD windows, each once)
needs_shared = pytest.mark.skipif(
    not (SHARED_SPEECH / "clips.jsonl").exists(), reason=f"real speech not found at {SHARED_SPEECH} (../shared)"
)


def _frame_rms(samples: np.ndarray) -> np.ndarray:
    frames = samples[: samples.size // 320 * 320].reshape(-1, 320)
    return np.sqrt((frames**2).mean(axis=1)) if frames.size else np.zeros(1)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 2}


@pytest.fixture(scope="module")
def recording():
    if not (SHARED_SPEECH / "clips.jsonl").exists():
        pytest.skip(f"real speech not found at {SHARED_SPEECH} (../shared)")
    samples, clips = script_module("make_long_audio").build(SHARED_SPEECH, 125.0)
    return samples, clips


@pytest.fixture(scope="module")
def pipeline(whisper_target, whisper_source):
    return build_pipeline(whisper_target, whisper_source, PipelineOptions(language="en", decode=options_that_draft(route="windows")))


@pytest.fixture(scope="module")
def transcript(whisper_target, whisper_source, recording):
    """The file in timestamp mode (a prompt would be every window's, as faster-whisper's batched pipeline gives it:
    ``test_each_window_conditioned_on_the_text_before_it_is_exact``)."""
    decode = options_that_draft(route="windows", timestamps="segment")
    pipeline = build_pipeline(whisper_target, whisper_source, PipelineOptions(language="en", decode=decode))
    return pipeline.transcribe(recording[0], request_id="long", check=True)


class CrashingSource:
    """The real drafter, except that it crashes as it starts the chosen requests.

    It crashes at once rather than after some drafting: a drafter thread at a lower priority may
    still be encoding when the target finishes a short block, and the crash must be seen."""

    def __init__(self, source, crash_in):
        self.inner, self.crash_in = source, crash_in
        self.name, self.vocabulary, self.languages, self.eos_token = (
            source.name, source.vocabulary, source.languages, source.eos_token)

    def decode_text(self, tokens):
        return self.inner.decode_text(tokens)

    def prepare(self, request, language, threads):
        if self.crash_in(request.request_id):
            raise RuntimeError("drafter crashed")
        return self.inner.prepare(request, language, threads)


@needs_shared
def test_every_window_is_exact_and_every_clip_is_transcribed(transcript, recording):
    samples, clips = recording
    assert 100 < transcript.duration_s < 130 and transcript.detector == "silero-vad"
    # windows of at most 30 s of the speech joined (faster-whisper's batched pipeline's)
    assert len(transcript.windows) >= 4 and all(w.window.end_s - w.window.start_s <= 30.0 for w in transcript.windows)
    assert transcript.exact is True, [w.window.index for w in transcript.windows if not w.exact]
    assert all(w.result.method == "as2d" and w.result.source for w in transcript.windows)
    assert sum(w.result.accepted for w in transcript.windows) > 0  # the drafter really drafted
    for clip in clips:  # every clip is (nearly all) inside windows, and its words come out
        inside = [w for w in transcript.windows if w.start_s < clip["end_s"] and w.end_s > clip["start_s"]]
        covered = sum(min(w.end_s, clip["end_s"]) - max(w.start_s, clip["start_s"]) for w in inside)
        assert covered >= 0.9 * (clip["end_s"] - clip["start_s"]), clip["id"]
        said = _words(" ".join(w.text for w in inside))
        expected = _words(clip["text"])
        assert len(expected & said) >= 0.7 * len(expected), (clip["id"], expected - said)
    # what was skipped is mostly quiet: its median 20 ms frame is far under the louder speech frames (a clip's loud
    # background between two sentences may be skipped, as faster-whisper's batched VAD skips it)
    speech_map = transcript.windows[0].speech
    speech = _frame_rms(speech_map.joined(samples))
    skipped = np.concatenate([_frame_rms(samples[int(a * SR) : int(b * SR)]) for a, b in transcript.skipped])
    assert np.median(skipped) < 0.25 * np.percentile(speech, 95)
    gaps = sorted([(a / SR, b / SR) for a, b in speech_map.spans] + list(transcript.skipped))
    assert gaps[0][0] == 0 and abs(gaps[-1][1] - samples.size / SR) < 1e-6
    assert all(abs(a[1] - b[0]) < 1e-6 for a, b in zip(gaps, gaps[1:]))  # speech and silence tile the file


@needs_shared
def test_each_window_conditioned_on_the_text_before_it_is_exact(whisper_target, whisper_ct2_source, recording):
    """Whisper's long form: each window's prompt is the text before it, with its timestamps (as Whisper feeds
    its tokens back); the check decodes each window target-only on that same prompt."""
    samples = recording[0][: 50 * SR]
    decode = options_that_draft(route="windows", timestamps="segment", prompt="A reading.",
                                condition_on_previous_text=True)
    pipeline = build_pipeline(whisper_target, whisper_ct2_source, PipelineOptions(language="en", decode=decode))
    conditioned = pipeline.transcribe(samples, request_id="conditioned", check=True)
    first, second = conditioned.windows[:2]
    assert conditioned.exact is True and len(conditioned.windows) >= 2 and second.result.accepted > 0
    audio = second.speech.joined(samples)[second.window.start : second.window.end]  # of the speech joined
    previous = marked_up(first.result.segments)
    assert previous.startswith("<|0.00|>") and previous.endswith("|>") and previous.count("<|") >= 4
    asked = Request("w1", audio, language="en", timestamps="segment", prompt="A reading.", previous_text=previous)
    assert run_request(asked, whisper_target, None, "target-only").tokens == second.tokens
    alone = attrs.evolve(asked, previous_text=None)
    assert run_request(alone, whisper_target, None, "target-only").tokens != second.tokens


@needs_shared
def test_subtitles_have_a_cue_per_timestamp_segment_inside_its_window(transcript):
    cues = [(s.start_s, s.end_s, s.text.strip()) for s in transcript.segments]
    lengths = [b - a for a, b, _ in cues]
    assert len(cues) > 2 * len(transcript.windows) and np.median(lengths) <= 8.0 and max(lengths) <= 30.0
    assert all(a <= b and a <= c for (a, b, _), (c, _, _) in zip(cues, cues[1:]))  # in order
    for w in transcript.windows:  # each cue starts inside its window, and its cues never overlap
        assert all(w.start_s <= s.start_s <= s.end_s for s in w.segments)
        assert all(a.end_s <= b.start_s for a, b in zip(w.segments, w.segments[1:]))
    # (a window's last cue may end past the window, even past the next one's start, as in faster-whisper's batched
    # pipeline: an end rounded to 1 ms past its stretch of speech, or a timestamp past the window's audio, is moved
    # by the pause after it: BENCHMARKS.md section 44)
    assert " ".join(t for _, _, t in cues) == " ".join(w.text for w in transcript.windows)
    subtitles = list(srt.parse(to_srt(cues)))
    assert [(s.start.total_seconds(), s.end.total_seconds(), s.content) for s in subtitles] == [
        (round(a, 3), round(b, 3), t) for a, b, t in cues if t]
    captions = webvtt.from_string(to_vtt(cues))
    assert [(c.start_in_seconds, c.text) for c in captions] == [(int(a), t) for a, _, t in cues if t]


@needs_shared
def test_the_drafter_ran_ahead_to_the_next_window(whisper_target, whisper_source, recording):
    samples, _ = recording
    ahead = LookaheadSource(whisper_source)
    pipeline = build_pipeline(whisper_target, ahead, PipelineOptions(language="en", decode=WINDOWS))  # only its requests are used here
    first, second = (pipeline.request(f"ahead-{i}", samples[i * 8 * SR : (i + 1) * 8 * SR]) for i in range(2))
    ahead.queue_next(second, 1)
    job = ahead.prepare(first, "en", 1)
    list(job.pieces())
    job.close()
    waiting = ahead._ahead
    assert waiting is not None and waiting.request_id == second.request_id  # started before anyone asked for it
    drafted_ahead = [p.tokens for p in ahead.prepare(second, "en", 1).pieces()]
    fresh = whisper_source.prepare(second, "en", 1)
    assert drafted_ahead == [p.tokens for p in fresh.pieces()] and drafted_ahead
    fresh.close()


@needs_shared
def test_a_drafter_crashing_mid_file_and_mid_stream_changes_nothing(whisper_target, whisper_source, recording):
    samples = recording[0][: 40 * SR]
    crashing = CrashingSource(whisper_source, lambda request_id: request_id.endswith(("-w001", "-b0002")))
    pipeline = build_pipeline(whisper_target, crashing, PipelineOptions(language="en", decode=WINDOWS))
    transcript = pipeline.transcribe(samples, request_id="crash", check=True)
    assert len(transcript.windows) >= 2 and transcript.exact is True
    assert "drafter crashed" in transcript.windows[1].result.producer_error
    stream = pipeline.stream(block_s=4.0, context_s=8.0, check=True)
    for start in range(0, 16 * SR, 4 * SR):  # fast pace: each block as soon as the previous is done
        stream.feed(samples[start : start + 4 * SR])
    stream.finish()
    assert [b.exact for b in stream.blocks] == [True] * 4
    assert "drafter crashed" in stream.blocks[2].result.producer_error
    summary = stream.summary()
    assert summary["exact"] is True and summary["drafter_failures"] == 1 and summary["blocks"] == 4
    assert [b.view_start_s for b in stream.blocks] == [0, 0, 8, 8] and stream.text


@needs_shared
def test_a_fast_stream_equals_target_only_on_every_view(pipeline, recording):
    samples = recording[0][: 26 * SR]
    session = pipeline.stream(block_s=4.0, context_s=12.0, check=True)
    blocks = session.feed(samples[: 10 * SR]) + session.feed(samples[10 * SR :]) + session.finish()
    assert [round(b.end_s, 1) for b in blocks] == [4, 8, 12, 16, 20, 24, 26]
    assert [b.view_start_s for b in blocks] == [0, 0, 0, 12, 12, 12, 24]
    assert all(b.exact for b in session.blocks) and session.summary()["exact"] is True
    assert [b.final for b in blocks] == [False, False, True, False, False, True, True]
    summary = session.summary()
    assert summary["p95_lag_s"] >= summary["p50_lag_s"] > 0 and summary["decode_tps"] > 0


@pytest.fixture(scope="module")
def target_only(whisper_target):
    return build_pipeline(whisper_target, None, PipelineOptions(method="target-only", language="en", decode=WINDOWS))


def test_every_format_gives_the_text_of_the_16_bit_wav(target_only, tmp_path_factory):
    folder = tmp_path_factory.mktemp("formats")
    reference = target_only.transcribe(BUNDLED)
    assert reference.audio.codec == "pcm_s16le" and len(reference.windows) == 1
    assert "printing" in reference.text.lower()
    samples = load_audio(BUNDLED)
    for name in ("flac", "ogg", "mp3", "f32.wav"):
        path = encode(folder / f"clip.{name}", samples, name)
        assert target_only.transcribe(path).text == reference.text, name


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    not_audio = tmp_path / "notes.txt"
    not_audio.write_text("not audio " * 50)
    result = runner.invoke(cli, ["run", str(not_audio)])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and result.output.count("\n") == 1
    result = runner.invoke(cli, ["run", str(BUNDLED), "--language", "xx", "--method", "target-only"])
    assert result.exit_code == 2 and result.output == "Error: whisper-base has no language 'xx'\n"


def test_cli_writes_srt_for_a_file(tmp_path):
    """A cue per timestamp segment by default; one per window with --timestamps none."""
    run = ["run", str(BUNDLED), "--method", "target-only", "--language", "en"]
    result = CliRunner().invoke(cli, [*run, "--format", "srt"])
    assert result.exit_code == 0, result.output
    cues = list(srt.parse(result.output))
    assert len(cues) >= 4 and cues[0].start.total_seconds() < 1 and cues[-1].end.total_seconds() <= 26.004
    assert all((c.end - c.start).total_seconds() <= 8 for c in cues) and "printing" in cues[0].content.lower()
    result = CliRunner().invoke(cli, [*run, "--format", "srt", "--timestamps", "none"])
    window = list(srt.parse(result.output))  # the window's one segment, in cues of at most 2 lines of 42
    assert window[0].start.total_seconds() == 0 and abs(window[-1].end.total_seconds() - 26.004) < 0.001
    text = " ".join(c.content.replace("\n", " ") for c in window)
    assert text == " ".join(c.content.replace("\n", " ") for c in cues)
    result = CliRunner().invoke(cli, [*run, "--json", "--timestamps", "none"])
    out = json.loads(result.output)
    assert out["windows"][0]["text"] == text and out["audio"]["codec"] == "pcm_s16le"
    assert out["skipped_silence"] == [] and out["totals"]["windows"] == 1 and out["tokens"]
    (segment,) = out["segments"]  # without timestamps: the window
    assert (segment["start_s"], segment["window"], segment["text"]) == (0.0, 0, out["windows"][0]["segments"][0]["text"])
    assert segment["end_s"] == pytest.approx(26.004, abs=0.001)


def test_cli_stream_prints_a_line_per_block_and_a_summary(tmp_path):
    plot = tmp_path / "stream.png"
    result = CliRunner().invoke(cli, ["stream", str(BUNDLED), "--pace", "fast", "--method", "target-only",
                                      "--language", "en", "--block-s", "8", "--context-s", "16", "--json",
                                      "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    *blocks, summary = lines
    assert [b["end_s"] for b in blocks] == [8, 16, 24, pytest.approx(26.004, abs=1e-3)]
    assert [b["final"] for b in blocks] == [False, True, False, True]
    assert summary["summary"] and summary["blocks"] == 4 and summary["p95_lag_s"] >= summary["p50_lag_s"]
    assert "printing" in summary["text"].lower() and plot.stat().st_size > 0
    result = CliRunner().invoke(cli, ["stream", str(BUNDLED), "--method", "nope"])
    assert result.exit_code == 2 and result.output.startswith("Error: ") and result.output.count("\n") == 1


def test_pipeline_from_a_configuration_transcribes_exactly():
    pipeline = pipeline_from_config(REPO / "configs" / "whisper-asr.toml")
    assert pipeline.options.method == "as2d" and pipeline.options.language == "en"
    transcript = pipeline.transcribe(BUNDLED, check=True)
    assert transcript.exact is True and transcript.windows[0].result.source == "whisper-tiny.en"
    assert "printing" in transcript.text.lower()


@full_only  # the script that makes BENCHMARKS.md's whole-file rows (23 s): the full run's
def test_the_whole_file_benchmark_runs_interleaved_rounds_and_quotes_medians(tmp_path, capsys):
    """``scripts/bench_long_audio.py`` on 32 s made of the bundled clip (two requests): every method once per round,
    as2d drafting with ``as2d run``'s drafter and exact in each round, and a table of medians."""
    clip = load_audio(BUNDLED)
    gap = np.zeros(SR, dtype=np.float32)
    audio = np.concatenate([clip, gap] * int(np.ceil(32 * SR / (clip.size + gap.size))))[: 32 * SR]
    path = tmp_path / "long.wav"
    soundfile.write(path, audio, SR)
    out = tmp_path / "rows.jsonl"
    script_module("bench_long_audio").main([str(path), "--methods", "as2d,target-only", "--rounds", "2",
                                      "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["round"], r["method"]) for r in rows] == [(1, "target-only"), (1, "as2d"), (2, "target-only"),
                                                         (2, "as2d")]
    assert [r["exact"] for r in rows] == [None, True, True, True]  # each against the first target-only round
    assert {r["source"] for r in rows if r["method"] == "as2d"} == {DEFAULT_SOURCE}
    assert rows[0]["windows"] >= 2 and rows[0]["tokens"] == rows[1]["tokens"] > 0
    table = capsys.readouterr().out
    assert "| as2d | " in table and "2 rounds" in table and "| yes |" in table


def test_where_the_words_go_lists_the_stretches_where_two_systems_differ(tmp_path, monkeypatch, capsys):
    """``scripts/where_words_go.py``: a lost last clip shows as one stretch of deletions, a single-word choice as
    another, each with both systems' errors there; stretches where both err alike are left out."""
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    reference = tmp_path / "long.json"
    reference.write_text(json.dumps([{"text": "The cat sat on the mat."}, {"text": "Ten of clubs."}]))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps({"method": method, "text": text}) for method, text in [
        ("greedy", "The cat sat on a mat."), ("beams", "The hat sat on a mat. Ten of clubs.")]) + "\n")
    monkeypatch.setattr("sys.argv", ["where_words_go.py", str(rows), str(reference)])
    script_module("where_words_go").main()
    out = capsys.readouterr().out
    assert "reference words 1-2: 'cat'" in out and "reference words 6-9: 'ten of clubs'" in out
    assert "'the'" not in out  # "a" for "the": both systems alike
    assert "    greedy  3 errors: - | - | -" in out
    assert out.rstrip().endswith("errors where the systems differ: greedy 3, beams 1")
