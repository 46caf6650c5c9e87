"""The chunked-source contract: drafters that transcribe fixed-length audio chunks.

External CTC drafters (Parakeet, SenseVoice) and classic recognisers
(PocketSphinx) do not generate token by token. In the paper (Appendix C.1,
D.2.5) they process the request audio in 2.56-second chunks and publish each
finished chunk's text at once, with the chunk's time span and no confidences.
This module holds what all of them share:

- ``chunk_spans`` cuts the fixed request audio into ``chunk_s`` pieces;
- ``ChunkedJob`` runs a per-request transcriber over those chunks in order and
  yields one ``DraftPiece(boundary=True, span_s=...)`` per finished chunk, so
  the producer publishes each chunk atomically and in audio order;
- ``ChunkedSource`` implements the ``Source`` contract on top of a model's
  ``transcribe_chunk(samples, language)``;
- ``WordVocabulary`` gives word-level recognisers a token vocabulary whose text
  puts a space before every word, as the text bridge expects.

A chunked source never touches the target: chunk edges reset only the
drafter's own decoding, never the target's cache. The text bridge holds back the
last word of everything pushed, so a word cut at a chunk edge is not published
until the next chunk shows whether it continues (a next chunk that starts
without a word-initial space is joined to it).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import attrs
import numpy as np

from as2d_core.capabilities import Closable
from as2d_core.contracts import SAMPLE_RATE, DraftPiece, Request

DEFAULT_CHUNK_S = 2.56


@attrs.frozen
class ChunkTokens:
    """One chunk's drafter tokens; confidences only when the model really gives them."""

    tokens: tuple[int, ...] = attrs.field(converter=lambda t: tuple(int(x) for x in t))
    confidences: tuple[float, ...] | None = attrs.field(
        default=None, converter=attrs.converters.optional(lambda c: tuple(float(x) for x in c))
    )

    def __attrs_post_init__(self) -> None:
        if self.confidences is not None and len(self.confidences) != len(self.tokens):
            raise ValueError(f"{len(self.confidences)} confidences for {len(self.tokens)} tokens")


ChunkResult = ChunkTokens | Sequence[int]
Transcriber = Callable[[np.ndarray], ChunkResult]


def _chunk_size(chunk_s: float, sample_rate: int) -> int:
    """Samples in a full chunk: one rule for the spans and for padding the last chunk, so they always agree."""
    if chunk_s <= 0:
        raise ValueError(f"chunk length must be positive, got {chunk_s} s")
    return max(1, int(round(chunk_s * sample_rate)))


def chunk_spans(n_samples: int, chunk_s: float = DEFAULT_CHUNK_S, sample_rate: int = SAMPLE_RATE) -> list[tuple[int, int]]:
    """Sample ranges ``[start, end)`` of consecutive chunks; the last one may be shorter."""
    size = _chunk_size(chunk_s, sample_rate)
    return [(start, min(start + size, n_samples)) for start in range(0, n_samples, size)]


class ChunkedJob:
    """Transcribes one request chunk by chunk; each finished chunk is one atomic draft piece.

    ``transcribe`` is made for this request only (a recogniser may keep state
    across the request's chunks, never across requests); if it has a ``close``
    method, closing the job calls it. ``pad_last`` pads the
    final short chunk with silence for models exported with a fixed chunk shape.
    """

    def __init__(
        self,
        audio: np.ndarray,
        transcribe: Transcriber,
        chunk_s: float = DEFAULT_CHUNK_S,
        sample_rate: int = SAMPLE_RATE,
        pad_last: bool = False,
    ) -> None:
        self.audio = audio
        self.transcribe = transcribe
        self.chunk_s = chunk_s
        self.sample_rate = sample_rate
        self.pad_last = pad_last
        self.spans = chunk_spans(audio.size, chunk_s, sample_rate)
        self._size = _chunk_size(chunk_s, sample_rate)
        self._stop = threading.Event()
        self.ended_with_eos = False  # set once every chunk is transcribed: the transcript has ended
        self.chunks_done = 0

    def pieces(self) -> Iterator[DraftPiece]:
        for start, end in self.spans:
            if self._stop.is_set():
                return
            samples = self.audio[start:end]
            if self.pad_last and samples.size < self._size:
                samples = np.concatenate([samples, np.zeros(self._size - samples.size, samples.dtype)])
            result = self.transcribe(samples)
            chunk = result if isinstance(result, ChunkTokens) else ChunkTokens(tuple(result))
            self.chunks_done += 1
            yield DraftPiece(
                tokens=chunk.tokens,
                confidences=chunk.confidences,
                boundary=True,
                span_s=(start / self.sample_rate, end / self.sample_rate),
            )
        self.ended_with_eos = not self._stop.is_set()

    def close(self) -> None:
        """Stop before the next chunk (a chunk already running finishes first); release the transcriber."""
        self._stop.set()
        if isinstance(self.transcribe, Closable):
            self.transcribe.close()


class ChunkedSource:
    """Base class of chunked sources: subclasses provide ``transcribe_chunk`` and ``decode_text``.

    ``eos_token`` is -1 because CTC and word vocabularies have no end token: the
    end of the audio ends the transcript, which ``ChunkedJob.ended_with_eos`` says.
    """

    name: str = "chunked"
    vocabulary: str = "chunked"
    languages: frozenset[str] | None = None
    eos_token: int = -1
    chunk_s: float = DEFAULT_CHUNK_S
    pad_last: bool = False

    def transcribe_chunk(self, samples: np.ndarray, language: str, threads: int) -> ChunkResult:
        """Drafter tokens of one chunk of 16 kHz float32 audio."""
        raise NotImplementedError

    def decode_text(self, tokens: Sequence[int]) -> str:
        raise NotImplementedError

    def transcriber(self, request: Request, language: str, threads: int) -> Transcriber:
        """The per-request chunk transcriber; override to keep per-request recogniser state (``Closable``: released)."""
        return lambda samples: self.transcribe_chunk(samples, language, threads)

    def prepare(self, request: Request, language: str, threads: int) -> ChunkedJob:
        if self.languages is not None and language not in self.languages:
            raise ValueError(f"{self.name} drafts {', '.join(sorted(self.languages))}, not {language!r}")
        return ChunkedJob(
            request.audio,
            self.transcriber(request, language, threads),
            self.chunk_s,
            request.sample_rate,
            self.pad_last,
        )


class WordVocabulary:
    """Token ids for a word-level recogniser: words are interned as they appear.

    Ids are stable for the life of the source, so published drafter tokens never
    change meaning. Decoded text puts a space before every word (" the cat"), the
    form Whisper- and GPT-style target tokenizers start words with.
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._words: list[str] = []
        self._lock = threading.Lock()

    def encode(self, words: Sequence[str]) -> list[int]:
        with self._lock:
            out = []
            for word in words:
                if word not in self._ids:
                    self._ids[word] = len(self._words)
                    self._words.append(word)
                out.append(self._ids[word])
            return out

    def decode(self, tokens: Sequence[int]) -> str:
        with self._lock:
            return "".join(" " + self._words[t] for t in tokens if 0 <= t < len(self._words))

    def __len__(self) -> int:
        return len(self._words)


def ctc_greedy(logits: np.ndarray, blank: int, length: int | None = None) -> list[int]:
    """Best-path CTC decoding: argmax per frame, merge repeats, drop blanks."""
    best = np.asarray(logits)[: length if length is not None else None].argmax(-1)
    out, previous = [], None
    for token in best.tolist():
        if token != previous and token != blank:
            out.append(int(token))
        previous = token
    return out


def sentencepiece_text(pieces: Sequence[str]) -> str:
    """Text of sentencepiece pieces, keeping the space before the first word (``▁`` = space)."""
    return "".join(pieces).replace("\u2581", " ")
