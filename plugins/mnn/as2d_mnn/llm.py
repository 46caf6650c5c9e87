"""MNN's LLM engine (``MNN.llm``) as an as2d backend state.

The primitives verification needs, as checked on MNN 3.6.1:
- ``set_config({"all_logits": True, "precision": "high"})`` makes ``forward(ids)``
  return ``[1, len(ids), vocab]`` logits for every input position, and forward
  keeps the KV cache between calls;
- ``erase_history(begin, end)`` drops cached positions ``[begin, end)``: cache
  repair after partial or full rejection (``get_current_history()`` is not
  updated by it, so the length is tracked here);
- ``tokenizer_encode('<audio>/path.wav</audio>text')`` runs ``audio.mnn`` on the
  engine's own fbank and returns audio_start, N x audio_pad, audio_end and the
  text ids; the next ``forward`` puts the audio embeddings at the pad positions:
  an audio-conditioned prefill.

Loaded engines are kept for the life of the process: destroying one MNN Llm
while another is alive crashed the interpreter (MNN 3.6.1).
"""
from __future__ import annotations

import os
import tempfile
import threading
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.workers.native import import_quietly, native_stdout_to_stderr

from . import INSTALL, probe
from as2d_core.setup.paths import check_folder

LLM_FILES = ("config.json", "llm_config.json", "llm.mnn", "llm.mnn.weight", "tokenizer.mtok")
AUDIO_FILES = ("audio.mnn",)
LAYOUT = "a folder exported by MNN's llmexport (`--export mnn`)"
# MNN releases whose audio front end fails on Qwen3-ASR's encoder ("Padding blob size not match").
QWEN3_ASR_AUDIO_MIN = (3, 6, 2)


def mnn_version() -> tuple[int, ...] | None:
    try:
        MNN = import_quietly("MNN")
    except ImportError:
        return None
    text = getattr(MNN, "version", lambda: "0")()
    return tuple(int(part) for part in str(text).split(".")[:3] if part.isdigit())


def qwen3_asr_audio_reason() -> str | None:
    """None if this MNN can run Qwen3-ASR's audio encoder, else why not."""
    version = mnn_version()
    if version is None:
        return f"MNN is not installed: {INSTALL}"
    if version < QWEN3_ASR_AUDIO_MIN:
        return (f"MNN {'.'.join(map(str, version))} cannot run Qwen3-ASR's audio encoder (its audio front end fails "
                "with 'Padding blob size not match'; support is only in MNN's unreleased master after 3.6.1); "
                "build MNN from source or use the torch backend")
    return None


def require_device(device: str) -> None:
    """Refuse a device this MNN build would silently replace with CPU."""
    why = probe().get(device, f"unknown MNN device {device!r}")
    if why is not None:
        raise RuntimeError(f"MNN device {device!r} does not run here: {why}")


def write_wav(path: Path, audio: np.ndarray, sample_rate: int = 16_000) -> None:
    """16-bit PCM mono, the format MNN's C++ wav reader takes."""
    pcm = (np.clip(np.asarray(audio, np.float32), -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm.tobytes())


class MnnLlm:
    """One loaded export folder on one device; one request state at a time (a lock guards it)."""

    _loaded: dict[tuple[str, str], "MnnLlm"] = {}
    _loaded_lock = threading.Lock()

    @classmethod
    def load(cls, folder: str | Path, device: str = "cpu", threads: int = 1, audio: bool = True) -> "MnnLlm":
        required = LLM_FILES + (AUDIO_FILES if audio else ())
        folder = check_folder(folder, required, LAYOUT)
        require_device(device)
        key = (str(folder.resolve()), device)
        with cls._loaded_lock:
            if key not in cls._loaded:
                cls._loaded[key] = cls(folder, device, threads)
            return cls._loaded[key]

    def __init__(self, folder: Path, device: str, threads: int):
        mnn_llm = import_quietly("MNN.llm")

        self.folder, self.device = folder, device
        with native_stdout_to_stderr():  # "MNN use high precision" and load messages
            self._llm = mnn_llm.create(str(folder / "config.json"))
            self._llm.set_config({"all_logits": True, "precision": "high", "thread_num": int(threads),
                                  "backend_type": device, "tmp_path": tempfile.gettempdir()})
            self._llm.load()
        self._threads = int(threads)
        self.in_use = threading.Lock()
        self._text_tokenizer = None
        if (folder / "tokenizer.json").is_file():  # decodes byte-level pieces across token boundaries
            from tokenizers import Tokenizer

            self._text_tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    @property
    def device_in_use(self) -> list[str]:
        """The device the engine runs on: the probe refused any device this build would fall back from."""
        return [f"MNN:{self.device.upper()}"]

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self._llm.tokenizer_encode(text)]

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``; special tokens are kept (callers drop them).

        MNN decodes one token at a time into a Python str, which fails on a token
        holding part of a multi-byte character; with the checkpoint's
        tokenizer.json beside the export the bytes are joined first.
        """
        tokens = [int(t) for t in tokens]
        if self._text_tokenizer is not None:
            return self._text_tokenizer.decode(tokens, skip_special_tokens=False)
        out = []
        for token in tokens:
            try:
                out.append(self._llm.tokenizer_decode(token))
            except UnicodeDecodeError:
                out.append("\ufffd")
        return "".join(out)

    def prompt_ids(self, text: str, audio: np.ndarray | None = None) -> list[int]:
        """Token ids of ``text``; its ``{audio}`` marker becomes the engine's audio tag for ``audio``."""
        if audio is None:
            return self.encode(text)
        fd, name = tempfile.mkstemp(suffix=".wav", prefix="as2d-")
        os.close(fd)
        try:
            write_wav(Path(name), audio)
            return self.encode(text.replace("{audio}", f"<audio>{name}</audio>"))
        finally:
            os.unlink(name)

    def start(self, prompt: Sequence[int], threads: int) -> tuple["MnnState", np.ndarray]:
        """Clear the engine's history and prefill ``prompt``; returns the state and the prompt's logits."""
        if not self.in_use.acquire(timeout=30):
            raise RuntimeError(f"{self.folder} is still held by an unfinished request")
        try:
            self._llm.reset()
            state = MnnState(self, threads)
            logits = state.append(prompt)
        except Exception:
            self.in_use.release()
            raise
        return state, logits

    def set_threads(self, threads: int) -> None:
        if int(threads) != self._threads:
            self._llm.set_config({"thread_num": int(threads)})
            self._threads = int(threads)

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        out = self._llm.forward([int(t) for t in tokens])
        return np.array(out.read(), dtype=np.float32).reshape(len(tokens), -1)

    def erase(self, begin: int, end: int) -> None:
        self._llm._c_obj.erase_history(int(begin), int(end))


class MnnState:
    """The KV state of one request in an ``MnnLlm`` (the as2d_lm.lm.LMState protocol)."""

    def __init__(self, engine: MnnLlm, threads: int):
        self.engine = engine
        self.length = 0
        self.closed = False
        engine.set_threads(threads)

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        if not tokens:
            raise ValueError("append needs at least one token")
        logits = self.engine.forward(tokens)
        self.length += len(tokens)
        return logits

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot cut {self.length} cached positions to {length}")
        if length < self.length:
            self.engine.erase(length, self.length)
            self.length = length

    def use_threads(self, threads: int) -> None:
        self.engine.set_threads(threads)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.engine.in_use.release()
