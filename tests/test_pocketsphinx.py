"""PocketSphinx as a real chunked source: real decoding of real English speech, exact as2d output."""
import numpy as np
import pytest

from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.chunked import chunk_spans
from as2d_core.decode.producer import Producer
from as2d_core.decode.events import EventLog
from as2d_core.setup.paths import models_dir
from as2d_core.setup.plugins import load_registry
from as2d_core.setup.catalog import resolve_bridge
from conftest import speech_audio
from drafting import options_that_draft
from tokenizer_bridges import TextBridge

pytest.importorskip("pocketsphinx")
pytest.importorskip("as2d_pocketsphinx")

CARDS = "cmu_cards_en_w00"  # "ten of clubs four queen of clubs seven of clubs"


@pytest.fixture(scope="module")
def source():
    return load_registry().get("source", "pocketsphinx").factory({"models_dir": models_dir()})


def test_registered_with_the_catalog_info():
    part = load_registry().get("source", "pocketsphinx")
    assert part.info["languages"] == ("en",) and part.info["vocabulary"] == "pocketsphinx-words"


def test_decodes_real_speech_chunk_by_chunk(source):
    request = Request("cards", speech_audio(CARDS))
    job = source.prepare(request, "en", 1)
    pieces = list(job.pieces())
    job.close()
    spans = chunk_spans(request.audio.size)
    assert [p.span_s for p in pieces] == [(s / 16000, e / 16000) for s, e in spans]
    assert all(p.boundary and p.confidences is None for p in pieces)
    text = source.decode_text([t for p in pieces for t in p.tokens]).lower()
    assert "clubs" in text.split() and "of" in text.split()
    assert job.ended_with_eos


def test_unknown_preset_and_incomplete_model_folder_are_refused(tmp_path):
    from as2d_pocketsphinx.source import PocketSphinxSource

    with pytest.raises(ValueError, match="preset"):
        PocketSphinxSource(preset="turbo")
    with pytest.raises(FileNotFoundError, match=r"lacks hmm/.*\*\.lm\.bin.*\*\.dict"):
        PocketSphinxSource(model_dir=tmp_path)


class WordTarget:
    """Stands in for a target session's text encoder: one id per distinct word (case kept)."""

    eos_token = -7

    def __init__(self):
        self.ids = {}

    def encode_text(self, text):
        return [self.ids.setdefault(w, len(self.ids)) for w in text.split()]


def test_real_chunks_publish_atomically_without_half_words(source):
    request = Request("librivox", speech_audio("librivox_sense_en_w00"))
    target = WordTarget()
    buffer = CandidateBuffer(request.request_id, source.name, "p")
    producer = Producer(source.prepare(request, "en", 1), TextBridge(source.decode_text, target.encode_text, -7),
                        buffer, 8, EventLog())
    producer.run()
    assert producer.error is None
    spans = [(s / 16000, e / 16000) for s, e in chunk_spans(request.audio.size)]
    chunked = [b for b in buffer.batches if not b.final]
    assert [b.span_s for b in chunked] == [s for s in spans if s in {b.span_s for b in chunked}]  # in audio order
    assert all(b.published_at <= c.published_at for b, c in zip(buffer.batches, buffer.batches[1:]))
    words = {i: w for w, i in target.ids.items()}
    published = " ".join(words[t] for b in buffer.batches for t in b.tokens if t != -7)
    recognised = source.decode_text(range(len(source.words))).split()
    assert all(w in recognised for w in published.split())  # only whole recognised words, never fragments


@pytest.fixture(scope="module")
def whisper_base():
    try:
        return load_registry().get("target", "whisper-base").factory({"models_dir": models_dir()})
    except (FileNotFoundError, KeyError) as exc:
        pytest.skip(f"whisper-base is not installed ({exc})")


@pytest.mark.parametrize("window", ["cmu_cards_en_w00", "librivox_sense_en_w01"])
def test_as2d_with_pocketsphinx_equals_target_only(source, whisper_base, window):
    request = Request(window, speech_audio(window))
    reference = run_request(request, whisper_base, None, "target-only")
    result = run_request(request, whisper_base, source, "as2d", options_that_draft(budget=7),
                         bridge=resolve_bridge(source, whisper_base))
    assert result.tokens == reference.tokens, f"{window}: as2d differs from target-only"
    assert result.producer_error is None and result.published > 0
    assert all(b.span_s is not None for b in result.batches if not b.final)
