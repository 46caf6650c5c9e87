"""Parakeet CTC plugin on a tiny random-weight model in the real onnx-asr folder format."""
import numpy as np
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.decode.chunked import chunk_spans, ctc_greedy
from as2d_core.setup.paths import models_dir
from as2d_core.setup.plugins import load_registry
from as2d_core.setup.catalog import resolve_bridge
from conftest import speech_row

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("as2d_parakeet")
SPEECH = speech_row("librivox_sense_en_w01")["file"]  # real English speech, 9.7 s


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from build_tiny_parakeet import build

    return build(tmp_path_factory.mktemp("parakeet") / "parakeet-ctc")


@pytest.fixture(scope="module")
def source(folder):
    return load_registry().get("source", "parakeet-ctc").factory({"models_dir": folder.parent})


def test_missing_folder_names_files_and_layout(tmp_path):
    (tmp_path / "parakeet-ctc").mkdir()
    (tmp_path / "parakeet-ctc" / "vocab.txt").write_text("<blk> 0\n")
    factory = load_registry().get("source", "parakeet-ctc").factory
    with pytest.raises(FileNotFoundError, match=r"lacks model\.onnx; expected layout: model\.onnx \(inputs audio_signal"):
        factory({"models_dir": tmp_path})


def test_registered_consistently_with_the_catalog():
    info = load_registry().get("source", "parakeet-ctc").info
    assert info["languages"] == ("en",) and info["vocabulary"] == "parakeet-ctc"
    assert info["model_dir"] == "parakeet-ctc" and info["required_files"] == ("model.onnx", "vocab.txt")


def test_reports_the_provider_that_really_runs(source):
    assert source.device_in_use[0] in ("CPUExecutionProvider", "NnapiExecutionProvider")
    assert source.device_note.startswith(f"running on {source.device_in_use[0]}")


def test_greedy_ctc_of_its_own(source):
    audio = load_audio(SPEECH)[:40960]
    logprobs, valid = source.logprobs(audio)
    assert logprobs.shape[-1] == len(source.pieces) and 0 < valid <= logprobs.shape[0]
    expected = [t for t in ctc_greedy(logprobs, source.blank, valid) if t not in source.hidden]
    tokens = source.transcribe_chunk(audio)
    assert tokens == expected and tokens, "the tiny model should emit tokens"
    assert source.blank not in tokens


def test_matches_onnx_asr_on_the_same_folder(folder, source):
    onnx_asr = pytest.importorskip("onnx_asr")
    from onnx_asr.preprocessors.numpy_preprocessor import NemoPreprocessorNumpy

    from as2d_parakeet.features import log_mel, mel_filterbank

    reference = NemoPreprocessorNumpy("nemo80")
    assert np.allclose(mel_filterbank(80), reference._melscale_fbanks, atol=1e-6)
    model = onnx_asr.load_model("nemo-conformer-ctc", str(folder))
    audio = load_audio(SPEECH)
    for start, end in chunk_spans(audio.size)[:3]:
        chunk = audio[start:end]
        ref, ref_len = reference(chunk[None].copy(), np.array([chunk.size]))
        ours, valid = log_mel(chunk)
        assert valid == ref_len[0] and np.allclose(ours[:, :valid], ref[0][:, :valid], atol=1e-3)
        expected = model.recognize(chunk).replace("<unk>", "")
        assert source.decode_text(source.transcribe_chunk(chunk)).strip() == expected.strip()


def test_chunks_are_published_atomically_in_order(source):
    request = Request("librivox", load_audio(SPEECH))
    job = source.prepare(request, "en", 1)
    pieces = list(job.pieces())
    assert [p.span_s for p in pieces] == [(s / 16000, e / 16000) for s, e in chunk_spans(request.audio.size)]
    assert all(p.boundary and p.confidences is None for p in pieces)
    with pytest.raises(ValueError, match="not 'de'"):
        source.prepare(request, "de", 1)


def test_as2d_with_parakeet_equals_target_only(source):
    try:
        target = load_registry().get("target", "whisper-base").factory({"models_dir": models_dir()})
    except (FileNotFoundError, KeyError) as exc:
        pytest.skip(f"whisper-base is not installed ({exc})")
    request = Request("librivox", load_audio(SPEECH))
    reference = run_request(request, target, None, "target-only")
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=7),
                         bridge=resolve_bridge(source, target))
    assert result.tokens == reference.tokens
    assert result.producer_error is None
