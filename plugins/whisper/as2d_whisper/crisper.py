"""CrisperWhisper's speculative decoding (``crisperwhisper-sd``) as an outside peer, in an environment of its own.

The PyPI package ``crisperwhisper`` ships ``ctranslate2-crisperwhisper``, a CTranslate2 fork that replaces
the ``ctranslate2`` module and adds ``Whisper.generate_speculative``: a draft-and-verify loop in C++, with
a fixed K or an adaptive one (``min/max_speculative_tokens``) and vocabulary maps between draft and main
model. Because it replaces a module as2d uses, it lives in its own virtual environment, made by
``as2d peers install crisperwhisper`` (``install_env``): ``peers/crisperwhisper/venv`` beside the models
folder (``~/.local/share/as2d/peers/crisperwhisper/venv``, or next to ``$AS2D_MODELS_DIR``). A worker
process on that environment's Python (``crisper_worker``) loads whisper-base (the same CTranslate2 weights
as faster-whisper, float32 or int8) as the main model and tiny.en (CTranslate2, int8) as the draft, and
the peer drives it over a pipe; its start and the model load stay off every clock.

Each row's ``exact`` is against the fork's own greedy ``generate`` on the same features, with the same
suppression list (``generate_speculative`` has no blank suppression, so neither has that greedy decode).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import attrs
import numpy as np

from as2d_core.setup.paths import absent_files, models_dir
from as2d_core.setup.peers import PeerOutput, PeerUnavailable
from as2d_core.workers import lifetimes

from .features import log_mel, pad_or_trim
from .peers import build_ct2_folder

NAME = "crisperwhisper"
PACKAGES = ("ctranslate2-crisperwhisper>=4.7.1.post3,<5", "numpy")  # all the worker imports
INSTALL = f"as2d peers install {NAME}"
DRAFT_FOLDER = "whisper-tiny.en-ct2"
DRAFT_FILES = ("model.bin", "config.json", "tokenizer.json")
MAX_NEW_TOKENS = 224  # Whisper's own cap on one window's tokens (n_text_ctx // 2)
WORKER = Path(__file__).with_name("crisper_worker.py")


class PeerEnvError(RuntimeError):
    """The peer's environment could not be made; the message says why and what to do."""


def env_dir(root: Path | None = None) -> Path:
    """``peers/crisperwhisper`` beside the models folder: the venv and its ``ready.json``."""
    return (root or models_dir()).parent / "peers" / NAME


def env_python(root: Path | None = None) -> Path:
    return env_dir(root) / "venv" / "bin" / "python"


def env_ready(root: Path | None = None) -> dict | None:
    """What ``install_env`` recorded (versions), or None when the environment is absent or incomplete."""
    marker = env_dir(root) / "ready.json"
    if not (marker.is_file() and env_python(root).is_file()):
        return None
    return json.loads(marker.read_text())


def install_env(root: Path | None = None, force: bool = False, log=print) -> Path:
    """Make the environment: a venv with ``PACKAGES`` from the package index, checked to hold the fork."""
    folder = env_dir(root)
    if env_ready(root) is not None and not force:
        log(f"{NAME}: the environment is ready at {folder / 'venv'}")
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    python = env_python(root)
    try:
        log(f"{NAME}: creating {folder / 'venv'}")
        _run([sys.executable, "-m", "venv", str(folder / "venv")], "could not create the virtual environment")
        log(f"{NAME}: installing {' '.join(PACKAGES)} from the package index")
        _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--retries", "1",
              "--timeout", "20", *PACKAGES],
             f"could not install {', '.join(PACKAGES)} (is the package index reachable? this machine may be offline)")
        version = _run([str(python), "-c", "import ctranslate2; ctranslate2.models.Whisper.generate_speculative; "
                        "print(ctranslate2.__version__)"],
                       "the installed ctranslate2 is not CrisperWhisper's fork (no Whisper.generate_speculative)")
    except PeerEnvError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    (folder / "ready.json").write_text(json.dumps({"ctranslate2": version.strip(), "packages": list(PACKAGES),
                                                   "python": sys.version.split()[0]}, indent=1))
    log(f"{NAME}: ready (ctranslate2-crisperwhisper {version.strip()}) at {folder / 'venv'}")
    return folder


def _run(command: list[str], why: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise PeerEnvError(f"{NAME}: {why}; `{' '.join(command[:4])} ...` exited {done.returncode}: "
                           + " | ".join(said))
    return done.stdout


@attrs.frozen
class _Vocabulary:
    """What the worker needs of both tokenizers: the main model's prompt ids, end token, suppression list
    (CTranslate2's ``suppress_ids``, the list as2d's target applies) and the draft<->main id maps, matched
    by token string as CrisperWhisper's ``TokenRemapper`` does (-1: no counterpart)."""

    tokenizer: object
    eot: int
    suppress: list
    d2m: list
    m2d: list

    @classmethod
    def read(cls, main: Path, draft: Path) -> "_Vocabulary":
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(main / "tokenizer.json"))
        main_vocab = tokenizer.get_vocab(with_added_tokens=True)
        draft_vocab = Tokenizer.from_file(str(draft / "tokenizer.json")).get_vocab(with_added_tokens=True)
        d2m, m2d = [-1] * (max(draft_vocab.values()) + 1), [-1] * (max(main_vocab.values()) + 1)
        for text, draft_id in draft_vocab.items():
            main_id = main_vocab.get(text)
            if main_id is not None:
                d2m[draft_id], m2d[main_id] = main_id, draft_id
        suppress = json.loads((main / "config.json").read_text())["suppress_ids"]
        return cls(tokenizer, tokenizer.token_to_id("<|endoftext|>"), suppress, d2m, m2d)

    def prompt(self, language: str) -> list[int]:
        names = ("<|startoftranscript|>", f"<|{language}|>", "<|transcribe|>", "<|notimestamps|>")
        return [self.tokenizer.token_to_id(name) for name in names]


class CrisperWorker:
    """One worker process (its environment's Python running ``crisper_worker``), its models loaded."""

    def __init__(self, python: Path, main: Path, draft: Path, compute_type: str, threads: int, vocab: _Vocabulary):
        self._stderr = tempfile.TemporaryFile()
        self._process = subprocess.Popen([str(python), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._stderr)
        self._lock = threading.Lock()
        lifetimes.own_process(f"{NAME} worker {self._process.pid}", partial(_stop, self._process))
        setup = {"main": str(main), "draft": str(draft), "compute_type": compute_type, "draft_compute_type": "int8",
                 "threads": threads, "eot": vocab.eot, "suppress_tokens": vocab.suppress, "d2m": vocab.d2m,
                 "m2d": vocab.m2d}
        ready = self._exchange(json.dumps(setup).encode() + b"\n")
        self.version, self.load_s = ready["ctranslate2"], ready["load_s"]

    def decode(self, mode: str, features: np.ndarray, prompt: list[int], k: int = 0, k_min: int = 0,
               k_max: int = 0) -> dict:
        features = np.ascontiguousarray(features, dtype="<f4")
        header = {"mode": mode, "prompt": prompt, "max_new_tokens": MAX_NEW_TOKENS, "k": k, "k_min": k_min,
                  "k_max": k_max, "shape": list(features.shape)}
        with self._lock:
            return self._exchange(json.dumps(header).encode() + b"\n" + features.tobytes())

    def greedy(self, audio: np.ndarray, prompt: list[int]) -> dict:
        """The fork's own greedy decode, with its ``e2e_s`` from the audio in memory (each call decodes afresh,
        so that clock is as warm as the speculative one it is compared with)."""
        start = time.perf_counter()
        out = self.decode("greedy", _features(audio), prompt)
        return {**out, "e2e_s": time.perf_counter() - start}

    def _exchange(self, message: bytes) -> dict:
        try:
            self._process.stdin.write(message)
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = b""
        if not line:
            self._stderr.seek(0)
            said = self._stderr.read().decode(errors="replace").strip().splitlines()[-5:]
            raise PeerUnavailable(f"the {NAME} worker exited ({self._process.poll()}): {' | '.join(said)}")
        reply = json.loads(line)
        if "error" in reply:
            raise PeerUnavailable(f"the {NAME} worker failed: {reply['error']}")
        return reply


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.stdin.close()  # the worker ends at the end of its input
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


_workers: dict[tuple, tuple[CrisperWorker, _Vocabulary]] = {}  # the rows of one precision share a worker
_workers_lock = threading.Lock()


def _worker(root: Path, compute_type: str, threads: int) -> tuple[CrisperWorker, _Vocabulary]:
    if env_ready(root) is None:
        raise PeerUnavailable(f"{NAME}'s environment is not installed: run `{INSTALL}` "
                              f"(it makes {env_dir(root) / 'venv'})")
    draft = root / DRAFT_FOLDER
    if absent_files(draft, DRAFT_FILES):
        raise PeerUnavailable(f"the draft model {draft} is not installed: run `as2d models install {DRAFT_FOLDER}`")
    main = build_ct2_folder(root)
    key = (str(root), compute_type, threads)
    with _workers_lock:
        if key not in _workers:
            vocab = _Vocabulary.read(main, draft)
            _workers[key] = CrisperWorker(env_python(root), main, draft, compute_type, threads, vocab), vocab
        return _workers[key]


class CrisperWhisperPeer:
    """``generate_speculative`` with whisper-base (``compute_type``) as main model and tiny.en int8 as draft.

    ``k``: the tokens drafted per round; with ``k_max`` > ``k_min`` it only seeds the fork's adaptive K
    (+1 after a fully accepted round, -1 after a rejection, within [k_min, k_max], reset per window).
    The row's ``e2e_s`` runs from the audio in memory (log-mel, the pipe to the worker, both encoders,
    the decode) to the last token; ``decode_s`` is ``generate_speculative`` alone. The fork's greedy
    decode of the same window (its ``greedy_*`` fields) runs before, off the clock.
    """

    def __init__(self, threads: int, root: Path | None = None, compute_type: str = "float32", k: int = 5,
                 k_min: int = 0, k_max: int = 0):
        self.root = Path(root or models_dir())
        self.compute_type, self.k, self.k_min, self.k_max = compute_type, k, k_min, k_max
        self.worker, self.vocab = _worker(self.root, compute_type, threads)
        policy = f"adaptive K {k_min}-{k_max} seeded at {k}" if k_max > k_min else f"K={k}"
        self.note = (f"e2e from audio in memory: log-mel, pipe to the worker, both encoders, generate_speculative "
                     f"({policy}); decode_s: generate_speculative alone; exact: against the fork's own greedy "
                     f"generate; ctranslate2-crisperwhisper {self.worker.version}, whisper-base {compute_type}, "
                     f"tiny.en int8 draft")

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput:
        if language != "en":
            raise PeerUnavailable(f"skipped: the tiny.en draft drafts English only (window language {language!r}; "
                                  f"{NAME}-sd needs the language named)")
        prompt = self.vocab.prompt(language)
        greedy = self.worker.greedy(audio, prompt)
        start = time.perf_counter()
        out = self.worker.decode("speculative", _features(audio), prompt, self.k, self.k_min, self.k_max)
        e2e_s = time.perf_counter() - start
        tokens = out["tokens"]
        extra = {"ctranslate2_crisperwhisper": self.worker.version, "compute_type": self.compute_type,
                 "encode_s": out["encode_s"], "greedy_e2e_s": greedy["e2e_s"], "greedy_decode_s": greedy["decode_s"],
                 "speed_vs_own_greedy": greedy["e2e_s"] / e2e_s}
        return PeerOutput(tokens, self.vocab.tokenizer.decode(tokens), out["decode_s"], self.note, e2e_s=e2e_s,
                          greedy_tokens=greedy["tokens"], extra=extra)


def _features(audio: np.ndarray) -> np.ndarray:
    """The encoder input as as2d's target and faster-whisper compute it: [1, 80, 3000]."""
    return pad_or_trim(log_mel(audio))[None]
