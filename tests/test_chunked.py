"""The chunked-source contract: atomic, ordered chunk publication; no half words; exact output."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.chunked import (
    DEFAULT_CHUNK_S,
    ChunkedJob,
    ChunkedSource,
    ChunkTokens,
    WordVocabulary,
    chunk_spans,
    ctc_greedy,
    sentencepiece_text,
)
from as2d_core.decode.producer import Producer
from as2d_core.decode.events import EventLog
from as2d_core.setup.catalog import resolve_bridge
from tiny_lm import TinyLM
from tokenizer_bridges import TextBridge

MODEL = TinyLM(max_new_tokens=40)
SECONDS = 9.0  # four 2.56 s chunks, the last one short


def long_request(seed=0, seconds=SECONDS):
    rng = np.random.default_rng(seed)
    return Request(f"chunked-{seed}", rng.normal(0, 0.1, int(seconds * 16000)).astype(np.float32), language="en")


class PieceSource(ChunkedSource):
    """A chunked source with a sentencepiece-style vocabulary; chunk i drafts ``script[i]``."""

    name = "pieces"
    vocabulary = "pieces"
    languages = frozenset({"en"})

    def __init__(self, script, chunk_s=DEFAULT_CHUNK_S):
        self.script = [list(chunk) for chunk in script]
        self.pieces: list[str] = []
        self.chunk_s = chunk_s
        self.calls = []

    def piece_id(self, piece):
        if piece not in self.pieces:
            self.pieces.append(piece)
        return self.pieces.index(piece)

    def transcriber(self, request, language, threads):
        ids = [[self.piece_id(p) for p in chunk] for chunk in self.script]
        chunks = iter(ids)

        def transcribe(samples):
            self.calls.append(samples.size)
            return next(chunks, [])

        return transcribe

    def decode_text(self, tokens):
        return sentencepiece_text([self.pieces[t] for t in tokens])


class LenientTiny(TinyLM):
    """TinyLM whose text encoder maps any word to an id in its vocabulary (fragments join into odd words)."""

    def prepare(self, request, threads):
        session = super().prepare(request, threads)
        vocab = self.vocab
        session.encode_text = lambda text: [
            int(digits) % vocab for w in text.split() if (digits := "".join(c for c in w if c.isdigit()))
        ]
        return session


LENIENT = LenientTiny(max_new_tokens=40)


def words_of(tokens):
    return [f"\u2581t{t}" for t in tokens]


def test_chunk_spans_cover_the_audio():
    spans = chunk_spans(int(SECONDS * 16000))
    assert spans[0] == (0, 40960) and len(spans) == 4
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] == int(SECONDS * 16000) and spans[-1][1] - spans[-1][0] < 40960
    assert chunk_spans(16000, 0.5) == [(0, 8000), (8000, 16000)]
    with pytest.raises(ValueError, match="positive"):
        chunk_spans(100, 0)


def test_job_yields_one_boundary_piece_per_chunk_in_order():
    audio = np.zeros(int(SECONDS * 16000), np.float32)
    seen = []
    job = ChunkedJob(audio, lambda s: seen.append(s.size) or [len(seen)], pad_last=True)
    pieces = list(job.pieces())
    assert [p.tokens for p in pieces] == [(1,), (2,), (3,), (4,)]
    assert all(p.boundary and p.confidences is None for p in pieces)
    assert [p.span_s for p in pieces] == [(0.0, 2.56), (2.56, 5.12), (5.12, 7.68), (7.68, 9.0)]
    assert seen == [40960] * 4  # the short last chunk is padded to the fixed shape
    assert job.ended_with_eos and job.chunks_done == 4


def test_job_passes_real_confidences_only_and_stops_on_close():
    audio = np.zeros(16000 * 6, np.float32)
    job = ChunkedJob(audio, lambda s: ChunkTokens((5, 6), (0.9, 0.2)), chunk_s=2.0)
    pieces = job.pieces()
    assert next(pieces).confidences == (0.9, 0.2)
    job.close()
    assert list(pieces) == [] and not job.ended_with_eos
    with pytest.raises(ValueError):
        ChunkTokens((1, 2), (0.5,))


def test_word_vocabulary_puts_a_space_before_every_word():
    words = WordVocabulary()
    ids = words.encode(["the", "cat", "the"])
    assert ids == [0, 1, 0] and words.decode(ids) == " the cat the"


def test_ctc_greedy_merges_repeats_and_drops_blanks():
    frames = np.eye(4)[[0, 1, 1, 3, 2, 2, 3, 1, 1]]
    assert ctc_greedy(frames, blank=3) == [0, 1, 2, 1]
    assert ctc_greedy(frames, blank=3, length=3) == [0, 1]


def run_producer(source, request):
    """Run a chunked source's producer alone against a tiny target session; return the batches."""
    session = MODEL.prepare(request, 1)
    buffer = CandidateBuffer(request.request_id, source.name, "p")
    bridge = TextBridge(source.decode_text, session.encode_text, session.eos_token)
    producer = Producer(source.prepare(request, "en", 1), bridge, buffer, 8, EventLog())
    producer.run()
    assert producer.error is None
    return buffer.batches


def test_each_chunk_is_published_atomically_with_its_span():
    request = long_request()
    script = [words_of(range(3, 15)), words_of([20, 21]), [], words_of([22, 23, 24])]
    batches = run_producer(PieceSource(script), request)
    spans = chunk_spans(request.audio.size)
    chunked = [b for b in batches if not b.final]
    # twelve words in one chunk stay one batch (no publication-size split); the empty chunk publishes nothing
    assert [b.span_s for b in chunked] == [(s / 16000, e / 16000) for s, e in spans if s != spans[2][0]]
    assert [b.tokens for b in chunked] == [tuple(range(3, 14)), (14, 20), (21, 22, 23)]
    assert batches[-1].final and batches[-1].tokens == (24, MODEL.eos_token)
    assert [b.offset for b in batches] == [0, 11, 13, 16]


def test_a_word_cut_at_a_chunk_edge_is_never_published_half():
    # chunk 1 ends in "t2" whose word continues in chunk 2 ("9" has no word-initial space): the word is t29
    script = [["\u2581t5", "\u2581t2"], ["9", "\u2581t7"], ["\u2581t8"]]
    batches = run_producer(PieceSource(script), long_request(1, 7.0))
    published = [t for b in batches for t in b.tokens]
    assert published == [5, 29, 7, 8, MODEL.eos_token]
    assert batches[0].tokens == (5,)  # "t2" was held back at the chunk edge
    assert 2 not in published


def test_target_is_never_reset_by_chunks_and_output_is_exact():
    request = long_request(2)
    ref = run_request(request, MODEL, None, "target-only").tokens
    chunks = [words_of(ref[i : i + 9]) for i in range(0, len(ref), 9)][:4]
    source = PieceSource(chunks)
    result = run_request(request, MODEL, source, "as2d", DecodeOptions(budget=7),
                         bridge=resolve_bridge(source, MODEL))
    assert result.tokens == ref
    assert result.accepted > 0 and result.producer_error is None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 4),
    chunks=st.lists(
        st.lists(st.tuples(st.booleans(), st.integers(0, 40), st.booleans()), max_size=12), min_size=0, max_size=4
    ),
    use_reference=st.booleans(),
    budget=st.integers(1, 12),
)
def test_output_equals_target_only_whatever_the_chunks_publish(seed, chunks, use_reference, budget):
    request = long_request(seed)
    ref = run_request(request, LENIENT, None, "target-only").tokens
    script, i = [], 0
    for chunk in chunks:
        pieces = []
        for from_ref, token, space in chunk:  # reference words, junk words, or word fragments
            value = ref[i % len(ref)] if (from_ref and use_reference) else token
            i += 1
            pieces.append(("\u2581t" if space else "") + str(value))
        script.append(pieces)
    source = PieceSource(script)
    result = run_request(request, LENIENT, source, "as2d", DecodeOptions(budget=budget),
                         bridge=resolve_bridge(source, LENIENT))
    assert result.tokens == ref
    assert result.producer_error is None
