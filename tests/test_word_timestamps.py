"""Word timestamps (``--word-timestamps``) on the real whisper-base and real speech.

The words come from one aligner pass over the committed tokens (``as2d_whisper.alignment``), so as2d's
words are target-only's; they are in order and inside their segments, and they match faster-whisper's
``word_timestamps=True`` (the same method, on CTranslate2) on the same windows and the same weights.
"""
from __future__ import annotations

import json

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.input.audio import load_audio
from as2d_core.cli.main import cli
from as2d_core.setup.paths import models_dir
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.decode.options import DecodeOptions
from conftest import HAVE_SHARED, speech_audio, speech_row
from tiny_lm import TinyLM

# the repository's windows, then (when present) shared ones: one more English voice and a language
# written without spaces, whose words are characters
WINDOWS = ["cmu_cards_en_w00", "librivox_sense_en_w00"] + (["jfk_en_w00", "fleurs_ja_w00"] if HAVE_SHARED else [])
WORDS = DecodeOptions(word_timestamps=True)  # ``--word-timestamps``, a decoding option like the others


# --------------------------------------------------------------------------- the method's pieces, no model


def test_dtw_is_openai_whispers_path():
    """The vectorized warping path equals the plain cell-by-cell recurrence (ties to the left neighbour), and
    walks the edges to the corner as openai-whisper's trace does, so a path through costs that compare as
    nothing (NaN: a request of one audio frame, its scores' spread zero) still gives every row a start."""
    from as2d_whisper.alignment import dtw

    def plain(x):
        n, m = x.shape
        cost = np.full((n + 1, m + 1), np.inf, np.float32)
        came = np.zeros((n + 1, m + 1), int)
        cost[0, 0] = 0
        came[0, :], came[:, 0] = 2, 1  # along the first row: left; along the first column: up
        for j in range(1, m + 1):
            for i in range(1, n + 1):
                c = (cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1])
                k = 0 if c[0] < c[1] and c[0] < c[2] else 1 if c[1] < c[0] and c[1] < c[2] else 2
                cost[i, j], came[i, j] = x[i - 1, j - 1] + c[k], k
        i, j, path = n, m, []
        while i > 0 or j > 0:
            path.append((i - 1, j - 1))
            i, j = [(i - 1, j - 1), (i - 1, j), (i, j - 1)][came[i, j]]
        return np.array(path[::-1]).T

    rng = np.random.default_rng(0)
    for shape in [(1, 1), (3, 17), (12, 12), (20, 9), (25, 140)]:
        x = rng.normal(size=shape).astype(np.float32)
        x[:, ::5] = 0.0  # equal costs, so ties are decided too
        rows, frames = dtw(x)
        np.testing.assert_array_equal(np.stack([rows, frames]), plain(x), err_msg=str(shape))
    rows, frames = dtw(np.full((13, 1), np.nan, np.float32))
    np.testing.assert_array_equal(np.stack([rows, frames]), plain(np.full((13, 1), np.nan, np.float32)))
    assert np.count_nonzero(np.diff(rows, prepend=-1)) == 13  # a start for each row


def test_median_filter_is_the_median_of_mirrored_windows():
    from as2d_whisper.alignment import median_filter

    x = np.random.default_rng(1).normal(size=(2, 5, 40)).astype(np.float32)
    padded = np.pad(x, [(0, 0), (0, 0), (3, 3)], mode="reflect")
    expected = np.median(np.lib.stride_tricks.sliding_window_view(padded, 7, axis=-1), axis=-1)
    np.testing.assert_array_equal(median_filter(x), expected)
    short = x[..., :3]
    np.testing.assert_array_equal(median_filter(short), short)  # too short to mirror: unchanged


def test_punctuation_joins_its_neighbours():
    from as2d_whisper.alignment import _Timed, merge_punctuation

    words = [_Timed(w, [i], i, i + 1, 1.0) for i, w in enumerate([' "', "Hello", ",", " world", ".", '"'])]
    merge_punctuation(words)
    assert [w.word for w in words if w.word] == [' "Hello,', ' world."']
    assert [w.tokens for w in words if w.word] == [[0, 1, 2], [3, 4, 5]]


def test_words_split_at_spaces_and_at_characters(whisper_target):
    from as2d_whisper.alignment import split_words

    model = whisper_target.model
    decode = model.decode_text
    english = model.encode_text(" Mr. Dashwood's ill-disposed, isn't he?")
    assert [w for w, _ in split_words(english, decode, spaced=True)] == [
        " Mr", ".", " Dashwood's", " ill", "-disposed", ",", " isn't", " he", "?"]
    japanese = model.encode_text("東京都の天気は晴れです。")
    pieces = split_words(japanese, decode, spaced=False)
    # each piece is one token's whole characters; 晴 spans two tokens (its UTF-8 bytes) and stays one piece
    assert [w for w, _ in pieces] == ["東", "京", "都", "の", "天", "気", "は", "晴", "れ", "です", "。"]
    assert [t for _, ids in pieces for t in ids] == japanese


# --------------------------------------------------------------------------- the real model on real speech


@pytest.fixture(scope="module")
def transcripts(whisper_target, whisper_ct2_source):
    """Each window transcribed by as2d with words, checked against target-only (with its words)."""
    out = {}
    for item in WINDOWS:
        row = speech_row(item)
        options = PipelineOptions(language=row["lang"], decode=WORDS)
        out[item] = build_pipeline(whisper_target, whisper_ct2_source, options).transcribe(load_audio(row["file"]),
                                                                                    check=True)
    return out


def test_as2d_words_are_target_only_words(transcripts):
    for item, transcript in transcripts.items():
        (window,) = transcript.windows
        assert window.exact, item
        assert window.result.words and window.result.words == window.reference.words, item
        costs = window.as_dict()
        assert costs["words_exact"] and costs["words_s"] > 0 and costs["target_only_words_s"] > 0


def test_words_are_in_order_inside_their_window_and_spell_its_text(transcripts):
    for item, transcript in transcripts.items():
        (window,) = transcript.windows
        words = window.result.words
        duration = window.window.end_s - window.window.start_s
        assert all(0.0 <= w.start_s <= w.end_s <= duration + 1e-9 for w in words), item
        assert all(a.end_s <= b.start_s + 1e-9 for a, b in zip(words, words[1:])), item
        assert all(0.0 < w.probability <= 1.0 for w in words), item
        assert "".join(w.word for w in words).strip() == window.text, item


def test_words_match_faster_whisper_word_timestamps(transcripts):
    """The same method on the same weights and tokens: median start and end differences at most 50 ms,
    p95 at most 250 ms (``as2d whisper-words`` compares with faster-whisper's whole decode too)."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check  # the faster-whisper side of ``as2d whisper-words``

    model = word_check.faster_whisper_model()
    starts, ends = [], []
    for item, transcript in transcripts.items():
        result = transcript.windows[0].result
        theirs = word_check.same_token_words(model, speech_audio(item), result.language, result.tokens)
        window_starts, window_ends, paired = word_check.paired_differences(result.words, theirs)
        assert paired == len(result.words) == len(theirs), item  # the same words, in the same places
        starts += window_starts
        ends += window_ends
    for name, diffs in (("start", starts), ("end", ends)):
        assert np.median(diffs) <= 0.05 and np.percentile(diffs, 95) <= 0.25, (name, np.median(diffs),
                                                                               np.percentile(diffs, 95))


def test_timestamp_mode_segments_span_their_words(whisper_target, whisper_ct2_source):
    """Each segment's words spell its text, and the segment runs from its first word's start to its last word's
    end (faster-whisper moves a segment's ends to its words'; a word that runs far past its segment's timestamp
    is cut back to it instead, so a word never starts after its segment nor ends before it)."""
    row = speech_row("librivox_sense_en_w00")
    options = PipelineOptions(language="en", decode=attrs.evolve(WORDS, timestamps="segment"))
    transcript = build_pipeline(whisper_target, whisper_ct2_source, options).transcribe(load_audio(row["file"]), check=True)
    (window,) = transcript.windows
    assert window.exact and window.result.words == window.reference.words
    segments, words = window.result.segments, list(window.result.words)
    assert len(segments) > 1
    for segment in segments:  # each segment's words are the next ones, spelling its text, inside it
        mine = []
        while words and "".join(w.word for w in mine).strip() != segment.text.strip():
            mine.append(words.pop(0))
        assert "".join(w.word for w in mine).strip() == segment.text.strip()
        assert mine[0].start_s <= segment.start_s and mine[-1].end_s >= segment.end_s, segment
        assert all(a.end_s <= b.start_s for a, b in zip(mine, mine[1:])), segment
    assert not words


def test_words_of_later_windows_are_in_the_files_time(whisper_target):
    """Two windows of one file (at the pause the detector finds): each window's words in its own stretch."""
    audio = np.concatenate([speech_audio("cmu_cards_en_w00"), speech_audio("cmu_cards_en_w01")])
    options = PipelineOptions(method="target-only", language="en", decode=attrs.evolve(WORDS, route="windows",
                                                                                  chunk_length=6))
    transcript = build_pipeline(whisper_target, None, options).transcribe(audio)
    assert len(transcript.windows) == 2
    for window in transcript.windows:
        words = window.as_dict()["words"]
        assert words and all(window.start_s <= w["start_s"] <= w["end_s"] <= window.end_s for w in words)
    assert transcript.windows[1].as_dict()["words"][0]["start_s"] >= transcript.windows[1].start_s > 0


def test_run_json_gives_words_and_their_cost_for_both_methods():
    row = speech_row("cmu_cards_en_w00")
    out = CliRunner().invoke(cli, ["run", str(row["file"]), "--language", "en", "--method", "target-only",
                                   "--word-timestamps", "--check", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    (window,) = result["windows"]
    assert window["words_exact"] and window["words"][0]["word"].strip()
    assert set(window["words"][0]) == {"word", "start_s", "end_s", "probability"}
    assert result["totals"]["words_s"] > 0 and result["totals"]["target_only_words_s"] > 0


# --------------------------------------------------------------------------- bad input


def test_a_target_of_another_family_says_it_has_no_words(tiny_request):
    target = TinyLM()
    with pytest.raises(ValueError, match="word timestamps need a target that aligns words.*tiny-lm does not"):
        build_pipeline(target, None, PipelineOptions(method="target-only", decode=WORDS)).transcribe(
            tiny_request().audio)
    request = attrs.evolve(tiny_request(), word_timestamps=True)
    with pytest.raises(ValueError, match="does not offer word_timestamps"):
        run_request(request, target, None, "target-only")


def test_a_folder_without_the_aligner_names_the_install_command(tmp_path):
    """A whisper-base folder installed before word timestamps existed: one line, exit 2, the command that adds it."""
    installed, folder = models_dir() / "whisper-base", tmp_path / "whisper-base"
    folder.mkdir()
    for name in ("encoder.onnx", "encoder.onnx.data", "decoder.onnx", "decoder.onnx.data", "tokenizer.json"):
        (folder / name).symlink_to(installed / name)
    meta = json.loads((installed / "model.json").read_text())
    meta.pop("alignment", None)
    (folder / "model.json").write_text(json.dumps(meta))
    args = ["run", str(speech_row("cmu_cards_en_w00")["file"]), "--language", "en", "--method", "target-only",
            "--word-timestamps"]
    out = CliRunner().invoke(cli, args, env={"AS2D_MODELS_DIR": str(tmp_path)})
    assert out.exit_code == 2
    assert "has no aligner graph (aligner.onnx)" in out.output and "`as2d models install whisper-base`" in out.output


def test_a_request_without_word_timestamps_keeps_no_audio(whisper_target):
    """Only a request that asks for words leaves its encoding with the target after decoding."""
    audio = speech_audio("cmu_cards_en_w00")
    run_request(Request(request_id="no-words", audio=audio, language="en"), whisper_target, None, "target-only")
    assert "no-words" not in whisper_target._words.kept
