"""SenseVoice Small plugin on a tiny random-weight model in the real funasr-onnx folder format."""
import numpy as np
import pytest

from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.chunked import chunk_spans, ctc_greedy
from as2d_core.setup.plugins import load_registry
from conftest import speech_row

pytest.importorskip("torch")
pytest.importorskip("sentencepiece")
pytest.importorskip("kaldi_native_fbank")
pytest.importorskip("as2d_sensevoice")
SPEECH = speech_row("librivox_sense_en_w01")["file"]  # real English speech, 9.7 s


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from build_tiny_sensevoice import build

    return build(tmp_path_factory.mktemp("sensevoice") / "sensevoice-small")


@pytest.fixture(scope="module")
def source(folder):
    return load_registry().get("source", "sensevoice-small").factory({"models_dir": folder.parent})


def test_missing_folder_names_files_and_layout(tmp_path):
    factory = load_registry().get("source", "sensevoice-small").factory
    with pytest.raises(FileNotFoundError, match=r"sensevoice-small does not exist; expected layout: .*model\.onnx"):
        factory({"models_dir": tmp_path})
    (tmp_path / "sensevoice-small").mkdir()
    with pytest.raises(FileNotFoundError, match=r"lacks model\.onnx, config\.yaml, am\.mvn, .*expected layout"):
        factory({"models_dir": tmp_path})


def test_registered_consistently_with_the_catalog():
    info = load_registry().get("source", "sensevoice-small").info
    assert info["languages"] == ("zh", "en", "yue", "ja", "ko") and info["vocabulary"] == "sensevoice-bpe"
    assert info["model_dir"] == "sensevoice-small"


def test_language_and_text_norm_controls_reach_the_model(folder, source):
    from as2d_sensevoice.source import SenseVoiceSource

    audio = load_audio(SPEECH)[:40960]
    tags = lambda s, lang: [s.pieces[i] for i in s.logits(audio, lang)[:4].argmax(-1)]  # noqa: E731
    assert tags(source, "en") == ["<|en|>", "<|NEUTRAL|>", "<|Speech|>", "<|withitn|>"]
    assert tags(source, "zh")[0] == "<|zh|>"
    assert tags(SenseVoiceSource(folder, use_itn=False), "ja")[::3] == ["<|ja|>", "<|woitn|>"]


def test_frontend_is_fbank_lfr_cmvn(source):
    audio = load_audio(SPEECH)[:40960]
    features = source.frontend(audio)
    frames = 1 + (40960 - 400) // 160  # snip_edges framing
    assert features.shape == (int(np.ceil(frames / 6)), 560)
    assert np.isfinite(features).all()


def test_greedy_ctc_drops_tags_and_blanks(source):
    audio = load_audio(SPEECH)[:40960]
    logits = source.logits(audio, "en")
    tokens = source.transcribe_chunk(audio, "en")
    assert tokens == [t for t in ctc_greedy(logits, 0) if t not in source.hidden] and tokens
    text = source.decode_text(tokens)
    assert "<|" not in text
    # the space before the first word is kept (chunks concatenate), exactly when its piece starts a word
    assert text.startswith(" ") == source.pieces[tokens[0]].startswith("\u2581")


def test_chunks_are_published_atomically_in_order(source):
    request = Request("librivox", load_audio(SPEECH))
    job = source.prepare(request, "en", 1)
    pieces = list(job.pieces())
    assert [p.span_s for p in pieces] == [(s / 16000, e / 16000) for s, e in chunk_spans(request.audio.size)]
    assert all(p.boundary and p.confidences is None for p in pieces)
    with pytest.raises(ValueError, match="not 'de'"):
        source.prepare(request, "de", 1)
