"""PocketSphinx 5 as a chunked source: each 2.56 s chunk is decoded as one utterance.

Decoding a chunk as a whole utterance gives its final hypothesis (the
incremental partial hypotheses of a running utterance can still change, so
they are never published). The US-English acoustic model, language model and
dictionary ship inside the pocketsphinx wheel; ``model_dir`` may name another
folder holding ``hmm/`` (or ``en-us/``), ``*.lm.bin`` and ``*.dict``.

The pocketsphinx binding keeps the GIL while it decodes, which would stall
the target loop's Python between its ONNX calls; each chunk is therefore fed
in short blocks (``feed_s``, 0.1 s by default), so the GIL changes hands
between them.

Its words are lowercase and unpunctuated. With ``casing`` the drafter
capitalises the request's first word and the pronoun "I", the two cheap
guesses that most often match a cased target; everything else is left as
recognised (the target verifies every token, so this only moves acceptance).
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.decode.chunked import DEFAULT_CHUNK_S, ChunkedSource, WordVocabulary
from as2d_core.contracts import Request

# Narrow beams and no second pass: about 0.1x real time on one core instead of 0.5x.
PRESETS = {
    "accurate": {},
    "fast": {"fwdflat": False, "bestpath": False, "maxhmmpf": 3000, "beam": 1e-40, "wbeam": 1e-20, "pbeam": 1e-40},
}
PRONOUN_I = {"i": "I", "i'm": "I'm", "i'll": "I'll", "i've": "I've", "i'd": "I'd"}


def _model_config(model_dir: str | Path | None) -> dict:
    """Config keys for a model folder other than the one in the wheel (with clear errors)."""
    if model_dir is None:
        return {}
    folder = Path(model_dir)
    hmm = next((p for p in (folder / "hmm", folder / "en-us") if p.is_dir()), None)
    lm = sorted(folder.glob("*.lm.bin"))
    dic = sorted(folder.glob("*.dict"))
    missing = [what for what, found in (("hmm/ (acoustic model folder)", hmm), ("*.lm.bin", lm), ("*.dict", dic)) if not found]
    if missing:
        raise FileNotFoundError(
            f"PocketSphinx model folder {folder} lacks {', '.join(missing)}; expected hmm/ (or en-us/) with the "
            f"acoustic model, a binary language model *.lm.bin and a pronunciation dictionary *.dict"
        )
    return {"hmm": str(hmm), "lm": str(lm[0]), "dict": str(dic[0])}


class _Transcriber:
    """One request's decoder, taken from the source's pool and given back on close."""

    def __init__(self, source: PocketSphinxSource) -> None:
        self.source = source
        self.decoder = source._take_decoder()
        self.first_word_seen = False

    def __call__(self, samples: np.ndarray) -> list[int]:
        pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype(np.int16)
        step = self.source.feed_samples
        self.decoder.start_utt()
        for start in range(0, pcm.size, step):  # short calls: the binding holds the GIL while it decodes
            self.decoder.process_raw(pcm[start : start + step].tobytes(), no_search=False, full_utt=False)
        self.decoder.end_utt()
        hyp = self.decoder.hyp()
        words = hyp.hypstr.split() if hyp is not None and hyp.hypstr else []
        if self.source.casing:
            words = [PRONOUN_I.get(w, w) for w in words]
            if words and not self.first_word_seen:
                words[0] = words[0][:1].upper() + words[0][1:]
        self.first_word_seen = self.first_word_seen or bool(words)
        return self.source.words.encode(words)

    def close(self) -> None:
        if self.decoder is not None:
            self.source._give_back(self.decoder)
            self.decoder = None


class PocketSphinxSource(ChunkedSource):
    """US-English PocketSphinx drafting chunk by chunk into a word vocabulary."""

    name = "pocketsphinx"
    vocabulary = "pocketsphinx-words"
    languages = frozenset({"en"})

    def __init__(
        self,
        preset: str = "fast",
        chunk_s: float = DEFAULT_CHUNK_S,
        casing: bool = True,
        model_dir: str | Path | None = None,
        feed_s: float = 0.1,
    ) -> None:
        if preset not in PRESETS:
            raise ValueError(f"unknown pocketsphinx preset {preset!r}; choose one of {', '.join(PRESETS)}")
        import pocketsphinx  # noqa: F401  (fail at build time, not in the producer thread)

        self.preset = preset
        self.chunk_s = chunk_s
        self.casing = casing
        self.feed_samples = max(160, int(feed_s * 16000))
        self.config = {"loglevel": "FATAL", **PRESETS[preset], **_model_config(model_dir)}
        self.words = WordVocabulary()
        self._pool: list = []
        self._lock = threading.Lock()
        self._give_back(self._new_decoder())  # load the models now, not on the first request

    def _new_decoder(self):
        from pocketsphinx import Config, Decoder

        return Decoder(Config(**self.config))

    def _take_decoder(self):
        with self._lock:
            if self._pool:
                return self._pool.pop()
        return self._new_decoder()

    def _give_back(self, decoder) -> None:
        with self._lock:
            self._pool.append(decoder)

    def transcriber(self, request: Request, language: str, threads: int) -> _Transcriber:
        return _Transcriber(self)

    def transcribe_chunk(self, samples: np.ndarray, language: str = "en", threads: int = 1) -> list[int]:
        """One chunk decoded on its own (convenience for tests and tools)."""
        job = _Transcriber(self)
        try:
            return job(samples)
        finally:
            job.close()

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.words.decode(tokens)
