"""The cheap Whisper parts: tiny.en drafting on CTranslate2 and the int8 whisper-base target.

Real models (``as2d models install whisper-base whisper-tiny.en whisper-base-int8
whisper-tiny.en-ct2``; a missing model fails the test) on real speech: the quick
start's clip in the repository, and the shared windows (skipped when ../shared is absent).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.contracts import DraftJob, DraftPiece, Source, Target
from as2d_core.decode.loop import greedy_reference
from as2d_core.setup.catalog import resolve_bridge
from conftest import full_only, needs_shared, speech_audio
from drafting import PacedTarget, options_that_draft

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"
# English windows of three corpora and one window the English drafter does not serve.
WINDOWS = ("jfk_en_w00", "fleurs_en_w01", "librispeech_en_w00", "ljspeech_en_w00", "fleurs_de_w00")


def _example_request() -> Request:
    return Request("ljspeech-example", load_audio(EXAMPLE), language="en")


def _window(item_id: str) -> Request:
    return Request(item_id, speech_audio(item_id))


def _draft(source, request: Request) -> tuple[list[DraftPiece], DraftJob]:
    job = source.prepare(request, "en", threads=1)
    try:
        return list(job.pieces()), job
    finally:
        job.close()


# --------------------------------------------------------------------------- CTranslate2 drafter


def test_ct2_pieces_are_its_greedy_tokens(whisper_ct2_source, whisper_source):
    """An early piece of first_call_tokens, then the rest: the tokens of one plain greedy CTranslate2 decode.

    The reference is CTranslate2's own ``generate`` on the same model, never another runtime: two
    runtimes' int8 arithmetic differ, so their tokens may part on any CPU.
    """
    import ctranslate2
    from as2d_whisper.ct2_drafter import Ct2WhisperSource
    from as2d_whisper.features import encoder_input

    registered = whisper_ct2_source  # registered defaults: encoder on the audio + 4 s (or 10 s chunks + 2 s), one call
    assert registered.first_call_tokens == 0 and registered.audio_margin_s == 4.0
    assert (registered.chunk_s, registered.chunk_margin_s) == (10.0, 2.0)
    source = Ct2WhisperSource(registered.dir, first_call_tokens=8)  # padded 30 s as the ONNX drafter
    assert isinstance(source, Source) and source.languages == frozenset({"en"})
    assert source.vocabulary == whisper_source.vocabulary and source.eos_token == whisper_source.eos_token
    pieces, job = _draft(source, _example_request())
    assert isinstance(job, DraftJob) and job.ended_with_eos
    assert [len(p.tokens) for p in pieces][0] == source.first_call_tokens == 8 and len(pieces) == 2
    assert all(p.boundary for p in pieces)
    tokens = [t for p in pieces for t in p.tokens]
    assert all(0 <= t < source.eos_token for t in tokens)
    model = source.model(1)
    features = model.encode(ctranslate2.StorageView.from_array(encoder_input(_example_request().audio, source.n_mels)))
    reference = model.generate(features, [[source.sot, source.no_timestamps]], beam_size=1, max_length=source.max_length,
                               suppress_blank=True, suppress_tokens=source.suppress_tokens)
    assert tokens == reference[0].sequences_ids[0]
    text = source.decode_text(tokens).lower()
    assert "printing" in text and "arts and crafts" in text, text


def test_ct2_single_call_gives_the_same_tokens(whisper_ct2_source):
    from as2d_whisper.ct2_drafter import Ct2WhisperSource

    whole = Ct2WhisperSource(whisper_ct2_source.dir, first_call_tokens=0)
    pieces, job = _draft(whole, _example_request())
    staged, _ = _draft(Ct2WhisperSource(whisper_ct2_source.dir, first_call_tokens=8), _example_request())
    assert len(pieces) == 1 and job.ended_with_eos
    assert list(pieces[0].tokens) == [t for p in staged for t in p.tokens]


def test_ct2_encoder_on_the_audio_plus_a_margin(whisper_ct2_source, whisper_target):
    """The encoder on 26 s + 6 s (not 30 s padded) still transcribes, stays under its length cap, and as2d stays exact."""
    from as2d_whisper.ct2_drafter import Ct2WhisperSource

    source = Ct2WhisperSource(whisper_ct2_source.dir, audio_margin_s=6)
    request = _example_request()
    pieces, job = _draft(source, request)
    tokens = [t for p in pieces for t in p.tokens]
    assert job.ended_with_eos and len(tokens) <= job.max_new_tokens == 16 + int(8 * request.audio.size / 16_000)
    text = source.decode_text(tokens).lower()
    assert "printing" in text and "arts and crafts" in text, text
    reference = run_request(request, whisper_target, None, "target-only")
    # paced: on a host whose drafter is slower than the cached target, the drafts would come after its last token
    result = run_request(request, PacedTarget(whisper_target), source, "as2d", options_that_draft(budget=7),
                         bridge=resolve_bridge(source, whisper_target))
    assert result.tokens == reference.tokens and result.accepted > 0


def test_ct2_long_audio_is_drafted_in_quiet_chunks(whisper_ct2_source, whisper_target):
    """The 26 s clip in three chunks cut in pauses, each encoded with 2 s of margin: one piece per chunk,
    each chunk's text in order, and as2d stays exact."""
    from as2d_whisper.features import HOP_LENGTH, log_mel

    request = _example_request()
    job = whisper_ct2_source.prepare(request, "en", threads=1)
    try:
        chunks = [mel for mel, _, _ in job._chunks]
        pieces = list(job.pieces())
    finally:
        job.close()
    frames = [mel.shape[2] for mel in chunks]
    assert len(chunks) == 3 and all(f <= 1000 + 200 + 200 for f in frames)  # 10 s, the cut's reach, the margin
    assert sum(frames) - 3 * 200 == pytest.approx(request.audio.size / HOP_LENGTH, abs=6)
    features = log_mel(request.audio)
    loudness = features.mean(axis=0)
    cut = frames[0] - 200
    assert loudness[cut - 5:cut + 5].mean() < loudness.mean()  # a pause, not a word
    assert len(pieces) == 3 and job.ended_with_eos
    texts = [whisper_ct2_source.decode_text(p.tokens).lower() for p in pieces]
    assert "printing" in texts[0] and "arts and crafts" in " ".join(texts), texts
    reference = run_request(request, whisper_target, None, "target-only")
    result = run_request(request, PacedTarget(whisper_target), whisper_ct2_source, "as2d", options_that_draft(budget=7),
                         bridge=resolve_bridge(whisper_ct2_source, whisper_target))
    assert result.tokens == reference.tokens and result.accepted > 0


@pytest.mark.parametrize("options", [dict(chunk_s=10.0), dict(chunk_s=0.0, audio_margin_s=6.0),
                                     dict(chunk_s=10.0, audio_margin_s=6.0, chunk_margin_s=-1.0)])
def test_ct2_chunk_options_out_of_range_are_refused(whisper_ct2_source, options):
    from as2d_whisper.ct2_drafter import Ct2WhisperSource

    with pytest.raises(ValueError, match="chunk_s must be more than 0 with an audio margin"):
        Ct2WhisperSource(whisper_ct2_source.dir, **options)


def test_ct2_decode_stops_at_the_asked_length(whisper_ct2_source):
    """Guards the measured CTranslate2 rule (a Whisper decode stops after max_length // 2 tokens)."""
    job = whisper_ct2_source.prepare(_example_request(), "en", threads=1)
    try:
        assert [len(job.decode(n)) for n in (1, 3, 8)] == [1, 3, 8]
        assert job.decode(3) == job.decode(8)[:3]
    finally:
        job.close()


def test_ct2_refuses_other_languages(whisper_ct2_source):
    with pytest.raises(ValueError, match="English only"):
        whisper_ct2_source.prepare(_example_request(), "de", threads=1)


def test_ct2_missing_model_files_say_how_to_install(tmp_path):
    from as2d_whisper.ct2_drafter import Ct2WhisperSource
    from as2d_core.setup.paths import ModelFilesMissing

    with pytest.raises(ModelFilesMissing, match=r"lacks model.json, tokenizer.json, model.bin.*as2d models install whisper-tiny.en-ct2"):
        Ct2WhisperSource(tmp_path)


def test_catalog_lists_the_new_parts_with_install_hints():
    from as2d_core.setup.plugins import load_registry

    registry = load_registry()
    for kind, name in (("source", "whisper-tiny.en-ct2"), ("target", "whisper-base-int8")):
        info = registry.get(kind, name).info
        assert info["model_install"] == f"as2d models install {name}" and info["model_dir"] == name
        assert registry.get("model", name) is not None


# --------------------------------------------------------------------------- int8 target


def test_int8_target_is_its_own_model(whisper_int8_target, whisper_target):
    assert isinstance(whisper_int8_target, Target) and whisper_int8_target.name == "whisper-base-int8"
    assert whisper_int8_target.vocabulary == whisper_target.vocabulary
    assert whisper_int8_target.device_in_use == ["CPUExecutionProvider"]


def test_int8_batched_verification_equals_one_at_a_time(whisper_int8_target):
    """Greedy one token per call (the engine's reference), then the whole answer verified in one call."""
    request = _example_request()
    session = whisper_int8_target.prepare(request, threads=2)
    try:
        reference = greedy_reference(session)
        assert len(reference) > 20
        text = session.decode_text(reference).lower()
        assert "printing" in text and "arts and crafts" in text, text
        session.truncate(0)
        predictions = session.verify(session.first_token(), reference[1:])
        assert predictions == [*reference[1:], session.eos_token]
    finally:
        session.close()


def test_int8_encoder_stays_close_to_fp32(whisper_int8_target):
    """The int8 encoder (weights per column, activations per frame, the first layer in fp32) stays close to fp32.

    ONNX Runtime's default recipe (one scale per weight and per input, every layer) was 17-21% RMS off on the
    bundled clips and lost whole sentences on long recordings; this one is about 4% off (BENCHMARKS.md section 17).
    """
    import json

    import numpy as np
    import onnxruntime as ort

    from as2d_core.setup.paths import models_dir
    from as2d_whisper.convert.quantize import INT8_RECIPE
    from as2d_whisper.features import encoder_input
    from conftest import speech_audio

    root = models_dir()
    assert json.loads((root / "whisper-base-int8" / "model.json").read_text())["int8"]["recipe"] == INT8_RECIPE
    mel = encoder_input(speech_audio("librivox_sense_en_w01"))
    fp32, int8 = (ort.InferenceSession(str(root / name / "encoder.onnx"), providers=["CPUExecutionProvider"])
                  .run(None, {"mel": mel})[0] for name in ("whisper-base", "whisper-base-int8"))
    relative_rms = float(np.sqrt(((int8 - fp32) ** 2).mean() / (fp32 ** 2).mean()))
    assert relative_rms < 0.07, relative_rms


def test_int8_beams_read_their_own_graph_with_every_layer_in_int8(whisper_int8_target):
    """Beam search on the int8 target reads decoder.beams.onnx, whose every weight product is int8 (its window
    groups and verification keep the layers fp32); as2d's beams are target-only's, on the same graph, one
    position a row a call: drafted tokens are refused there."""
    import onnx

    from as2d_core.decode.beam import BeamOptions, run_beam_request
    from as2d_whisper.graph_io import BEAMS_FILE

    graph = onnx.load(str(whisper_int8_target.model.dir / BEAMS_FILE))
    weights = {i.name for i in graph.graph.initializer}
    assert not [n.name for n in graph.graph.node if n.op_type in ("MatMul", "Gemm") and set(n.input) & weights]
    dims = whisper_int8_target.model.meta["dims"]
    products = sum(n.op_type == "MatMulIntegerToFloat" for n in graph.graph.node)
    assert products == dims["decoder_layers"] * 8 + 1  # q, k, v, out, cross q and out, fc1, fc2; the projection
    request = _example_request()
    session = whisper_int8_target.prepare(request, threads=2)
    rows = session.beam_rows(5)
    try:
        assert rows.graph_file == BEAMS_FILE
        with pytest.raises(ValueError, match="drafted tokens"):  # a wider call would round otherwise
            rows.advance([(0, 0, [session.first_token(), session.first_token()])] * 5)
    finally:
        rows.close()
        session.close()
    result = run_beam_request(request, whisper_int8_target, BeamOptions(5))
    assert "printing" in result.text.lower() and "arts and crafts" in result.text.lower(), result.text


def test_int8_missing_model_files_say_how_to_install(tmp_path):
    from as2d_core.setup.plugins import load_registry

    factory = load_registry().get("target", "whisper-base-int8").factory
    with pytest.raises(FileNotFoundError, match="as2d models install whisper-base-int8"):
        factory({"models_dir": tmp_path})


# --------------------------------------------------------------------------- as2d with the new parts


@pytest.mark.parametrize("budget", [pytest.param(3, marks=full_only), 7])
def test_as2d_with_ct2_drafter_equals_target_only_on_the_example(whisper_target, whisper_int8_target,
                                                                   whisper_ct2_source, budget):
    request = _example_request()
    for target in (whisper_target, whisper_int8_target):
        reference = run_request(request, target, None, "target-only")
        result = run_request(request, PacedTarget(target), whisper_ct2_source, "as2d", options_that_draft(budget=budget),
                             bridge=resolve_bridge(whisper_ct2_source, target))
        assert result.tokens == reference.tokens, f"{target.name}: {result.text!r} != {reference.text!r}"
        assert result.producer_error is None and result.source == whisper_ct2_source.name
        assert result.published > 0 and result.accepted > 0


@needs_shared
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("target_name,drafter_name", [
    # whisper-base with whisper-tiny.en-ct2 (as2d run's pair) runs on every window in test_exact_real_speech.py
    ("whisper-base", "whisper-tiny.en"), ("whisper-base-int8", "whisper-tiny.en-ct2"),
    ("whisper-base-int8", "whisper-tiny.en")])
def test_as2d_equals_target_only_on_real_windows(request, window, target_name, drafter_name):
    target = request.getfixturevalue("whisper_target" if target_name == "whisper-base" else "whisper_int8_target")
    source = request.getfixturevalue("whisper_ct2_source" if drafter_name.endswith("ct2") else "whisper_source")
    speech = _window(window)
    reference = run_request(speech, target, None, "target-only")
    assert reference.tokens, f"{window}: the target produced no tokens"
    result = run_request(speech, target, source, "as2d", options_that_draft(budget=7),
                         bridge=resolve_bridge(source, target))
    assert result.tokens == reference.tokens, f"{window} on {target_name}: {result.text!r} != {reference.text!r}"
    assert result.producer_error is None
    if reference.language == "en":
        assert result.source == source.name
        if result.published == 0:  # on a busy machine the target may finish a short window before the first batch
            result = run_request(speech, target, source, "as2d", options_that_draft(budget=7),
                                 bridge=resolve_bridge(source, target))
            assert result.tokens == reference.tokens and result.producer_error is None
        assert result.published > 0, f"{window}: the drafter published nothing in two runs"
    else:
        assert result.verify_calls == 0 and "does not draft" in result.note
