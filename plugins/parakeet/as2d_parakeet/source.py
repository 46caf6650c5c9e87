"""Parakeet CTC from a local ONNX folder, drafting chunk by chunk with greedy CTC decoding.

The folder is the onnx-asr layout of a NeMo CTC export: ``model.onnx`` (inputs
``audio_signal`` float [B, n_mels, T] and ``length`` int64 [B]; output
``logprobs`` [B, T', V+1]), ``vocab.txt`` (``token id`` per line, ``<blk>``
last, ``▁`` marking a word start) and an optional ``config.json``
(``features_size``, ``subsampling_factor``). The model gives no per-token
confidences worth publishing, so chunks are published without them, as in the paper.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.decode.chunked import DEFAULT_CHUNK_S, ChunkedSource, ctc_greedy, sentencepiece_text
from as2d_core.setup.paths import check_folder
from as2d_onnxruntime.sessions import OrtSessions

from .features import log_mel

REQUIRED_FILES = ("model.onnx", "vocab.txt")
LAYOUT = (
    "model.onnx (inputs audio_signal float [B,80,T], length int64 [B]; output logprobs), "
    "vocab.txt ('token id' per line, <blk> last), optional config.json (features_size, subsampling_factor); "
    "make it with `as2d parakeet export MODEL.nemo` (needs `pip install 'as2d-parakeet[nemo]'`)"
)


class ParakeetSource(ChunkedSource):
    """English Parakeet CTC drafter; one ONNX call per 2.56 s chunk."""

    name = "parakeet-ctc"
    vocabulary = "parakeet-ctc"
    languages = frozenset({"en"})

    def __init__(self, model_dir: str | Path, device: str = "auto", chunk_s: float = DEFAULT_CHUNK_S,
                 pad_last: bool = False) -> None:
        self.dir = Path(model_dir)
        check_folder(self.dir, REQUIRED_FILES, LAYOUT, "Parakeet CTC")
        config = json.loads((self.dir / "config.json").read_text()) if (self.dir / "config.json").is_file() else {}
        self.n_mels = int(config.get("features_size", 80))
        self.subsampling = int(config.get("subsampling_factor", 8))
        self.pieces = self._read_vocab(self.dir / "vocab.txt")
        self.blank = len(self.pieces) - 1
        self.hidden = {i for i, p in enumerate(self.pieces) if p.startswith("<") and p.endswith(">")}
        self.device = device
        self.chunk_s = chunk_s
        self.pad_last = pad_last
        self._sessions = OrtSessions(self.dir / "model.onnx", device)
        self.device_note = self._sessions.get(1)[1]  # fail now on a broken graph, not in the producer

    @staticmethod
    def _read_vocab(path: Path) -> list[str]:
        entries = {}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            token, _, index = line.rpartition(" ")
            if not token or not index.isdigit():
                raise ValueError(f"{path}:{n}: expected 'token id', got {line!r}")
            entries[int(index)] = token
        if sorted(entries) != list(range(len(entries))):
            raise ValueError(f"{path}: token ids must run from 0 without gaps")
        pieces = [entries[i] for i in range(len(entries))]
        if pieces[-1] != "<blk>":
            raise ValueError(f"{path}: the last token must be the CTC blank <blk>, got {pieces[-1]!r}")
        return pieces

    @property
    def device_in_use(self) -> list[str]:
        return self._sessions.device_in_use

    def logprobs(self, samples: np.ndarray, threads: int = 1) -> tuple[np.ndarray, int]:
        """Per-frame log-probabilities of one chunk and the number of valid output frames."""
        features, frames = log_mel(samples, self.n_mels)
        session = self._sessions.get(threads)[0]
        (logprobs,) = session.run(
            ["logprobs"], {"audio_signal": features[None], "length": np.array([frames], np.int64)}
        )
        valid = min((frames - 1) // self.subsampling + 1, logprobs.shape[1])
        return logprobs[0], valid

    def transcribe_chunk(self, samples: np.ndarray, language: str = "en", threads: int = 1) -> list[int]:
        logprobs, valid = self.logprobs(samples, threads)
        return [t for t in ctc_greedy(logprobs, self.blank, valid) if t not in self.hidden]

    def decode_text(self, tokens: Sequence[int]) -> str:
        return sentencepiece_text([self.pieces[t] for t in tokens])
