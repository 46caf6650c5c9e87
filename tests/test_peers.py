"""The outside peers on one short English clip: both run, and each row says whether it equals target-only.

faster-whisper greedy must give the target's greedy tokens exactly. transformers assisted generation
(whisper-base target, tiny.en assistant, different tokenizers) must run and report equality as a
boolean; it is not asserted equal, since any difference is a finding to report, not to hide.
The models must be installed (`as2d models install whisper-base whisper-tiny.en`); without them
these tests fail with that instruction rather than skip.
"""

import pytest

from as2d_core import Request, load_audio, run_request
from as2d_bench.peers import peer_row
from as2d_bench.runner import Window
from conftest import speech_row

CLIP = speech_row("librivox_sense_0870")["file"]


@pytest.fixture(scope="module")
def clip(whisper_target):
    window = Window("librivox_sense_0870", CLIP, "en")
    audio = load_audio(CLIP)
    reference = run_request(Request(window.id, audio, "en"), whisper_target, None, "target-only")
    assert len(reference.tokens) > 10
    return window, audio, reference


def _check_row(row, window, method):
    assert "error" not in row, row.get("error")
    assert row["method"] == method and row["window"] == window.id
    assert row["tokens"] > 0 and row["decode_s"] > 0
    assert isinstance(row["exact"], bool) and isinstance(row["text_equal"], bool)


def _peer(name: str):
    """A peer as `as2d bench` gets it: through the Whisper plugin's register_peers hook."""
    from as2d_bench.peers import make_peers

    return make_peers([name], threads=2)[name]


def test_faster_whisper_equals_target_only(clip):
    window, audio, reference = clip
    row = peer_row(window, "faster-whisper", _peer("faster-whisper"), audio, reference)
    _check_row(row, window, "faster-whisper")
    assert row["exact"], f"faster-whisper differs from target-only: {row['text']!r} vs {reference.text!r}"


def test_faster_whisper_int8_runs_and_reports_equality(clip):
    """int8 weights round differently from the float32 target: equality is reported, not asserted."""
    window, audio, reference = clip
    row = peer_row(window, "faster-whisper-int8", _peer("faster-whisper-int8"), audio, reference)
    _check_row(row, window, "faster-whisper-int8")
    assert "int8" in row["note"]
    print(f"faster-whisper-int8 exact={row['exact']} text={row['text']!r}")


def test_hf_assisted_runs_and_reports_equality(clip):
    from as2d_core.setup.peers import PeerUnavailable

    window, audio, reference = clip
    peer = _peer("hf-assisted")
    row = peer_row(window, "hf-assisted", peer, audio, reference)
    _check_row(row, window, "hf-assisted")
    assert row["verify_calls"] >= 1 and row["transformers"]
    assert "decode clock" in row["note"] or "clock includes" in row["note"]
    print(f"hf-assisted exact={row['exact']} text_equal={row['text_equal']} decode_s={row['decode_s']:.2f} "
          f"{row['note']}")
    with pytest.raises(PeerUnavailable, match="English only"):
        peer(audio, "de")
