"""The outside peers on one short English clip: they run, and each row says whether it equals target-only.

faster-whisper greedy must give the target's greedy tokens exactly. transformers assisted generation
(whisper-base target, tiny.en assistant, different tokenizers) and faster-whisper as users run it
(``transcribe()``: batched, or with its default fallback) must run and report equality as a boolean;
they are not asserted equal, since any difference is a finding to report, not to hide.
The models must be installed (`as2d models install whisper-base whisper-tiny.en`); without them
these tests fail with that instruction rather than skip.
"""

import pytest

from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_bench.peers import peer_row
from as2d_bench.runner import ManifestRow
from conftest import full_only, speech_row

CLIP = speech_row("librivox_sense_0870")["file"]


@pytest.fixture(scope="module")
def clip(whisper_target):
    window = ManifestRow("librivox_sense_0870", CLIP, "en")
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


@full_only  # a peer for the benchmarks: run with them, and in the full run
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


@pytest.mark.parametrize("name, how", [
    ("faster-whisper-batched4", "BatchedInferencePipeline, batch 4, temperature 0"),
    ("faster-whisper-batched8-int8", "BatchedInferencePipeline, batch 8, temperature 0"),
    ("faster-whisper-default", "default temperature fallback"),
])
def test_faster_whisper_as_users_run_it_reports_equality(clip, name, how):
    """transcribe() with its own VAD, timed from the samples in memory: the row's e2e_s is the peer's own clock."""
    window, audio, reference = clip
    row = peer_row(window, name, _peer(name), audio, reference)
    _check_row(row, window, name)
    assert how in row["note"] and row["exact_against"] == "target-only"
    assert row["e2e_s"] == row["decode_s"]
    print(f"{name} exact={row['exact']} text_equal={row['text_equal']} e2e_s={row['e2e_s']:.2f} text={row['text']!r}")


@full_only  # the whole-file peers of the benchmarks (as above)
def test_whole_file_peers_transcribe_a_recording():
    """Every peer registered with whole_file=True is a FilePeer; the equal-decoding row is greedy without fallback."""
    from as2d_core.setup.peers import FilePeer
    from as2d_core.setup.plugins import load_registry

    registry = load_registry()
    names = [n for n in registry.names("peer") if registry.get("peer", n).info.get("whole_file")]
    assert {"faster-whisper", "faster-whisper-default", "faster-whisper-batched4", "faster-whisper-batched8-int8"} <= set(names)
    audio = load_audio(CLIP)
    for name in ("faster-whisper", "faster-whisper-batched8"):
        peer = _peer(name)
        assert isinstance(peer, FilePeer)
        out = peer.transcribe_file(audio, "en")
        assert out.segments >= 1 and out.wall_s > 0 and "Dashwood" in out.text, (name, out)
    options = _peer("faster-whisper").file_peer.options
    assert options["temperature"] == 0.0 and options["condition_on_previous_text"] is False
    assert "temperature" not in _peer("faster-whisper-default").options  # faster-whisper's own fallback list
