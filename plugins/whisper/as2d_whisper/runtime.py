"""Whisper target and drafter for as2d on ONNX Runtime or MNN.

The target (whisper-base) verifies a root plus candidates in one decoder call;
the drafter (whisper-tiny.en, int8) decodes greedily on its own. Both keep the
self-attention cache in a preallocated numpy buffer whose first positions are
contiguous, so appending is a write and rejecting is a length change, and hold
the audio cross-attention K/V once per request. One session interface runs on
two small executors: ONNX Runtime (``*.onnx``, audio K/V bound through
IOBinding, new K/V written straight into the cache) and MNN (``*.mnn``, the
same graphs converted by ``as2d_whisper.convert.mnn.convert_mnn``; see
``mnn_backend``).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from as2d_core.contracts import DraftPiece, Request
from as2d_core.decode.sampling import Sampling
from as2d_core.decode.timestamps import TIME_PRECISION_S, TimestampRules
from as2d_core.setup.paths import ModelFilesMissing, absent_files, check_folder
from as2d_core.setup.paths import models_dir as default_models_dir
from as2d_onnxruntime import providers_for
from as2d_onnxruntime.sessions import OrtSessions

from .alignment import WordTimestamps
from .convert.weights import FORMAT_VERSION
from .features import request_encoder_input
from .graph_io import audio_feed

INSTALL_HINT = "run `as2d models install whisper-base whisper-tiny.en`"
MARKUP = re.compile(r"<\|(\d+\.\d+)\|>")  # a timestamp in text (``<|2.40|>``), as ``timestamps.marked_up`` writes it
LAST_TIMESTAMP = 1500  # <|30.00|>
MNN_INSTALL_HINT = ("run `python -m as2d_whisper.convert --mnn whisper-base whisper-tiny.en` (converts the installed "
                    "ONNX models; `as2d models install` does it too when MNN is installed)")
BACKENDS = ("onnxruntime", "mnn")
LAYOUT = "a Whisper folder converted by as2d: model.json, tokenizer.json, the encoder and decoder graphs"


class _OrtExecutor:
    """ONNX Runtime: each graph's sessions (one per thread count) from the ONNX Runtime backend plugin,
    which sets the one rule all as2d sessions share (see ``as2d_onnxruntime.sessions``)."""

    name = "onnxruntime"
    suffix = ".onnx"

    def __init__(self, model_dir: Path, device: str):
        self.dir, self.device = model_dir, device
        self.providers = providers_for(device)  # refuses at once a device this build lacks
        self._graphs: dict[str, OrtSessions] = {}
        self._lock = threading.Lock()

    def session(self, file: str, threads: int) -> ort.InferenceSession:
        with self._lock:
            graph = self._graphs.setdefault(file, OrtSessions(self.dir / file, self.device))
        return graph.get(threads)[0]

    def preload(self, files: Sequence[str], threads: int) -> None:
        for file in files:
            self.session(file, threads)

    @property
    def devices(self) -> list[str]:
        """Providers the ORT sessions report (what really runs, not what was asked)."""
        with self._lock:
            graphs = list(self._graphs.values())
        return graphs[0].device_in_use if graphs else list(self.providers)

    def encode(self, file: str, mel: np.ndarray, threads: int) -> np.ndarray:
        return self.session(file, threads).run(["cross_kv"], {"mel": mel})[0]

    def audio_input(self, cross_kv: np.ndarray) -> np.ndarray:
        """The encoder's audio K/V, contiguous: the decoder binds its blocks in place (``graph_io``)."""
        return np.ascontiguousarray(cross_kv, dtype=np.float32)

    def decoder(self, file: str, audio: np.ndarray, threads: int) -> "_OrtDecoder":
        return _OrtDecoder(self.session(file, threads), audio)


class _OrtDecoder:
    """A decoder session with the audio K/V bound once, in place; new K/V land straight in the caller's cache.

    ``audio`` must outlive the decoder: the binding points into its memory (``_DecoderState`` keeps it).
    """

    def __init__(self, session: ort.InferenceSession, audio: np.ndarray):
        self.session = session
        self.binding = session.io_binding()
        for name, block in audio_feed(audio).items():
            self.binding.bind_input(name, "cpu", 0, np.float32, list(block.shape), block.ctypes.data)

    @property
    def devices(self) -> list[str]:
        return self.session.get_providers()

    def run(self, ids: np.ndarray, cache: np.ndarray, p: int, k: int, logits: np.ndarray) -> None:
        row = cache[0].shape
        b = self.binding
        b.bind_cpu_input("tokens", ids)
        b.bind_input("past", "cpu", 0, np.float32, [p, *row], cache.ctypes.data)
        # new K/V land straight in the cache right after the first p positions.
        b.bind_output("new_kv", "cpu", 0, np.float32, [k, *row], cache[p:].ctypes.data)
        b.bind_output("logits", "cpu", 0, np.float32, [1, k, logits.shape[-1]], logits.ctypes.data)
        self.session.run_with_iobinding(b)


def _executor(backend: str, model_dir: Path, device: str):
    if backend == "onnxruntime":
        return _OrtExecutor(model_dir, device)
    if backend == "mnn":
        from .mnn_backend import MnnExecutor

        return MnnExecutor(model_dir, device)
    raise ValueError(f"unknown Whisper backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def read_model_folder(model_dir: str | Path, files: Sequence[str], hint: str = INSTALL_HINT):
    """``(folder, model.json, tokenizer)`` of a converted model folder holding ``files``; a clear error if not."""
    from tokenizers import Tokenizer

    folder = check_folder(model_dir, ["model.json", "tokenizer.json", *files], LAYOUT, "Whisper", hint)
    meta = json.loads((folder / "model.json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFilesMissing(
            f"{folder} holds model format {meta.get('format_version')}, this plugin reads {FORMAT_VERSION}; {hint} again")
    return folder, meta, Tokenizer.from_file(str(folder / "tokenizer.json"))


class TokenizerText:
    """Text of a model's ids and ids of text, through the folder's (complete) tokenizer; needs ``tokenizer`` and ``eot``."""

    tokenizer: "object"
    eot: int

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode([int(t) for t in tokens if int(t) < self.eot])

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


class WhisperVocabulary(TokenizerText):
    """A Whisper folder's special tokens (``meta``: its model.json), and the decoder prompt and timestamp rules
    they make: the target and both drafters build them here, so all three prompt a request alike."""

    meta: dict
    time_precision_s = TIME_PRECISION_S

    def read_special(self) -> None:
        special = self.special = self.meta["special"]
        self.sot, self.eot, self.no_timestamps = special["sot"], special["eot"], special["no_timestamps"]
        self.timestamp_begin: int = special.get("timestamp_begin", self.no_timestamps + 1)
        self.max_length: int = self.meta["max_length"]
        self.language_ids: dict[str, int] = self.meta.get("languages", {})  # multilingual: code -> token
        self.timestamp_rules = TimestampRules(self.timestamp_begin, self.eot, self.no_timestamps)

    @property
    def prompt_limit(self) -> int:
        """Whisper's cap on previous-text tokens: half the decoder's context, less one."""
        return self.max_length // 2 - 1

    def decoder_prompt(self, request: Request, language: str) -> list[int]:
        """``[<|startofprev|> hotwords previous] <|startoftranscript|> [language task] [<|notimestamps|>]``.

        The previous text is the request's prompt then its ``previous_text``, of which the last tokens
        that fit are kept, as Whisper keeps them; hotwords come first, as faster-whisper places them,
        and take their room from it, so the prompt never crowds out the response. (A target refuses a
        prompt or hotwords over the limit on their own first, ``check_prompt``; a drafter keeps what fits.)
        """
        hotwords = self._prompt_text(request.hotwords)[: self.prompt_limit]
        context = self._prompt_text(request.prompt) + self._prompt_text(request.previous_text)
        room = self.prompt_limit - len(hotwords)
        context = context[len(context) - room:] if len(context) > room else context
        start = [self.sot]
        if self.meta["multilingual"]:
            task = self.special["translate" if request.task == "translate" else "transcribe"]
            start += [self.language_ids[language], task]
        if request.timestamps == "none":
            start.append(self.no_timestamps)
        before = hotwords + context
        return ([self.special["sot_prev"], *before] if before else []) + start

    def check_prompt(self, request: Request) -> None:
        """Refuse a prompt or hotwords over Whisper's limit on their own (ValueError naming both numbers)."""
        for name in ("prompt", "hotwords"):
            count = len(self._prompt_text(getattr(request, name)))
            if count > self.prompt_limit:
                raise ValueError(f"the {name} is {count} tokens; {self.meta['name']} takes at most {self.prompt_limit} "
                                 f"(Whisper's limit: half its {self.max_length}-token context, less one)")

    def _prompt_text(self, text: str | None) -> list[int]:
        """Tokens of prompt text as Whisper encodes it (one leading space, the ends stripped); its timestamp markup
        (``<|2.40|>``) becomes this vocabulary's timestamp tokens (tiny.en's tokenizer file lacks them)."""
        text = (text or "").strip()
        if not text:
            return []
        tokens: list[int] = []
        for i, piece in enumerate(MARKUP.split(text if text.startswith("<|") else " " + text)):
            if i % 2:
                tokens.append(self.timestamp_begin + min(round(float(piece) / self.time_precision_s), LAST_TIMESTAMP))
            elif piece:
                tokens += self.encode_text(piece)
        return tokens


class _Model(WhisperVocabulary):
    """A converted model folder: metadata, tokenizer and the executor of one backend.

    ``decoder`` is the decoder graph's stem (``decoder`` or ``decoder.int8``);
    the backend adds its suffix (``.onnx`` or ``.mnn``).
    """

    def __init__(self, model_dir: str | Path, decoder: str, device: str, backend: str = "onnxruntime",
                 install_hint: str = INSTALL_HINT):
        if backend not in BACKENDS:
            raise ValueError(f"unknown Whisper backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        suffix = ".mnn" if backend == "mnn" else ".onnx"
        self.encoder_file, self.decoder_file = "encoder" + suffix, decoder + suffix
        hint = install_hint
        model_dir = Path(model_dir).expanduser()
        if backend == "mnn" and not absent_files(model_dir, ("model.json", "tokenizer.json")):
            hint = MNN_INSTALL_HINT
        self.dir, self.meta, self.tokenizer = read_model_folder(model_dir, [self.encoder_file, self.decoder_file], hint)
        self.backend = backend
        self.device = device
        self.executor = _executor(backend, self.dir, device)
        dims = self.meta["dims"]
        self.n_layers, self.n_heads = dims["decoder_layers"], dims["decoder_heads"]
        self.head_dim = dims["d_model"] // dims["decoder_heads"]
        self.n_vocab, self.n_mels = dims["n_vocab"], dims["n_mels"]
        self.read_special()
        self.suppress = np.asarray(self.meta["suppress_tokens"], dtype=np.int64)
        self.suppress_blank = np.asarray(self.meta["suppress_blank"], dtype=np.int64)
        self._lock = threading.Lock()
        # Opt-in reuse of prepared audio K/V for repeated requests on the same audio (tests, sweeps).
        # Off by default so end-to-end timings always include the encoder.
        self.audio_cache_size = 0
        self._audio_cache: dict[bytes, np.ndarray] = {}

    def preload(self, thread_counts: Sequence[int]) -> None:
        """Build the sessions a request will use now, at load time, so no request pays for them."""
        for threads in thread_counts:
            self.executor.preload([self.encoder_file, self.decoder_file], threads)

    @property
    def device_in_use(self) -> list[str]:
        """What really runs: ORT's session providers, or MNN's backend (the probe refuses silent fallbacks)."""
        return self.executor.devices

    def cross_kv(self, mel: np.ndarray, threads: int) -> np.ndarray:
        return self.executor.encode(self.encoder_file, mel, threads)

    def greedy(self, logits: np.ndarray, first_step: bool = False) -> np.ndarray:
        """Apply the suppression lists faster-whisper uses at beam 1, in place (the buffer is ours)."""
        logits[..., self.suppress] = -np.inf
        if first_step:
            logits[..., self.suppress_blank] = -np.inf
        return logits



class _DecoderState:
    """The self-attention cache plus the audio K/V of one request, on the model's executor."""

    def __init__(self, model: _Model, cross_kv: np.ndarray, threads: int):
        self.model = model
        self.cache = np.zeros((model.max_length, model.n_layers, 2, model.n_heads, model.head_dim), np.float32)
        self.length = 0  # positions (prompt + response) held in the cache
        self._cross = model.executor.audio_input(cross_kv)
        self._logits = np.empty((1, 1, model.n_vocab), np.float32)
        self.bind(threads)

    def bind(self, threads: int) -> None:
        """(Re)bind the audio K/V once to the decoder for ``threads``."""
        self.threads = threads
        self.decoder = self.model.executor.decoder(self.model.decoder_file, self._cross, threads)

    @property
    def devices(self) -> list[str]:
        return self.decoder.devices

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        """Run the decoder on ``tokens`` after the cache; returns logits [K, vocab] (a reused buffer)."""
        k, p = len(tokens), self.length
        if k == 0:
            raise ValueError("append needs at least one token")
        if p + k > self.model.max_length:
            raise ValueError(f"decoder context is {self.model.max_length} positions; {p} + {k} exceeds it")
        if self._logits.shape[1] < k:
            self._logits = np.empty((1, max(k, 2 * self._logits.shape[1]), self.model.n_vocab), np.float32)
        ids = np.asarray(tokens, dtype=np.int64).reshape(1, k)
        self.decoder.run(ids, self.cache, p, k, self._logits)
        self.length = p + k
        return self._logits[0, :k]

    def close(self) -> None:
        self.decoder = None
        self._cross = None
        self.cache = np.zeros((0,), np.float32)


def _audio_kv(model: _Model, request: Request, threads: int) -> np.ndarray:
    key = None
    if model.audio_cache_size:
        key = hashlib.sha1(request.audio.tobytes()).digest()
        with model._lock:
            if key in model._audio_cache:
                return model._audio_cache[key]
    mel = request_encoder_input(request, model.n_mels)
    cross = model.cross_kv(mel, threads)
    if key is not None:
        with model._lock:
            while len(model._audio_cache) >= model.audio_cache_size:
                model._audio_cache.pop(next(iter(model._audio_cache)))
            model._audio_cache[key] = cross
    return cross


def _top_probability(row: np.ndarray) -> float:
    """Softmax probability of the arg-max entry of one logits row."""
    return 1.0 / float(np.exp(row - row.max()).sum())


def _chosen_logprobs(rows: np.ndarray, tokens: Sequence[int]) -> list[float]:
    """Log-softmax of each row's chosen token (``rows``: ``[K, vocab]``, the scores the tokens were chosen from;
    untempered, as openai-whisper scores sampled tokens too)."""
    rows = rows.astype(np.float64)
    top = rows.max(axis=-1, keepdims=True)
    norm = top[:, 0] + np.log(np.exp(rows - top).sum(axis=-1))
    return [float(rows[j, t] - norm[j]) for j, t in enumerate(tokens)]


def _probability(row: np.ndarray, token: int) -> float:
    """Softmax probability of ``token`` in one logits row."""
    row = row.astype(np.float64)
    weights = np.exp(row - row.max())
    return float(weights[token] / weights.sum())


# --------------------------------------------------------------------------- target


class WhisperTargetSession:
    """One request on the target: prompt prefilled, verify appends root + candidates.

    In timestamp mode each verified position's logits get Whisper's timestamp rules for the response
    up to that position (``TimestampRules.apply_rows``): the session keeps the response tokens in its
    cache for that, so a batched verification decides as one step at a time would. A request at a
    temperature above 0 is sampled with noise drawn from its seed and each token's position
    (``as2d_core.decode.sampling``), so a batched verification draws what one step at a time would. For a
    request that asks (``Request.scores``) it also keeps each chosen token's log-probability and the
    no-speech probability (``contracts.ResponseScores``), as CTranslate2 computes them for faster-whisper.
    """

    def __init__(self, target: "WhisperTarget", request: Request, threads: int):
        model = self._model = target._model
        if request.task not in ("asr", "translate"):
            raise ValueError(f"whisper supports the tasks 'asr' and 'translate', not {request.task!r}")
        language = request.language
        if not model.meta["multilingual"] and (language not in (None, "en") or request.task != "asr"):
            raise ValueError(f"{model.meta['name']} only transcribes English")
        model.check_prompt(request)  # before the encoder runs
        cross = _audio_kv(model, request, threads)
        if request.word_timestamps and isinstance(target, WordTimestamps):
            target.keep_audio(request, cross)  # the words' pass after decoding reads the same encoding
        if model.meta["multilingual"]:
            if language is None:
                language = target.detect_language(request, threads, cross)
            if language not in model.language_ids:
                raise ValueError(f"{model.meta['name']} has no language {language!r}")
        else:
            language = "en"
        self.prompt = model.decoder_prompt(request, language)
        self.language = language
        self.eos_token = model.eot
        self.vocab_size = model.n_vocab
        self.timestamp_begin, self.time_precision_s = model.timestamp_begin, model.time_precision_s
        self._rules = model.timestamp_rules if request.timestamps != "none" else None
        self._sampling = Sampling(request.temperature, request.seed)
        self._response: list[int] = []  # the response tokens in the cache, for the timestamp rules
        self.max_new_tokens = model.max_length - len(self.prompt)
        self._state = _DecoderState(model, cross, threads)
        logits = self._state.append(self.prompt)
        self._no_speech = None  # with scores: at <|startoftranscript|>, before the suppressions edit the logits
        if request.scores:
            self._no_speech = _probability(logits[self.prompt.index(model.sot)], model.special["no_speech"])
        first_row = model.greedy(logits[-1], first_step=True)
        if self._rules is not None:
            self._rules.apply(first_row, [])
        self._first = self._sampling.choose(first_row[None], 0)[0]
        self._first_row = first_row.copy()  # beam search starts from it (``beam_rows``); the buffer is reused
        self._first_confidence = _top_probability(first_row)
        # with scores: the first token's log-probability, then the chosen token's after each cached position
        self._logprobs = _chosen_logprobs(first_row[None], [self._first]) if request.scores else None

    @property
    def cache_length(self) -> int:
        """Response tokens in the cache (the prompt is not counted)."""
        return self._state.length - len(self.prompt)

    @property
    def device_in_use(self) -> list[str]:
        return self._state.devices

    def first_token(self) -> int:
        return self._first

    def _appended(self, root: int, candidates: Sequence[int]) -> tuple[list[int], np.ndarray]:
        appended = [int(root), *(int(c) for c in candidates)]
        return appended, self._state.append(appended)

    def chosen(self, appended: list[int], logits: np.ndarray) -> list[int]:
        """The token after each position of ``appended`` (just added to the cache; ``logits``: the decoder's
        [K, vocab] for them): the suppressions and rules applied, then the request's choice (greedy or seeded
        sampling), the response extended (a window group's call hands its rows here)."""
        position = len(self._response) + 1  # the response position the first row scores
        logits = self._model.greedy(logits)
        if self._rules is not None:
            self._rules.apply_rows(logits, self._response, appended)
        self._response += appended
        tokens = self._sampling.choose(logits, position)
        if self._logprobs is not None:
            self._logprobs += _chosen_logprobs(logits, tokens)
        return tokens

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        return self.chosen(*self._appended(root, candidates))

    def verify_with_confidence(self, root: int, candidates: Sequence[int]) -> tuple[list[int], list[float]]:
        """Like verify, plus the probability of each greedy token (SpecASR's stopping rule needs it)."""
        appended, logits = self._appended(root, candidates)
        tokens = self.chosen(appended, logits)  # the rules edit ``logits`` in place
        return tokens, [_top_probability(row) for row in logits[: len(tokens)]]

    def first_token_confidence(self) -> float:
        return self._first_confidence

    def token_logprobs(self) -> list[float]:
        if self._logprobs is None:
            raise ValueError("token log-probabilities are kept only for a request that asks for scores")
        return list(self._logprobs)

    def no_speech_prob(self) -> float:
        if self._no_speech is None:
            raise ValueError("the no-speech probability is kept only for a request that asks for scores")
        return self._no_speech

    def beam_rows(self, width: int):
        """``width`` hypotheses from this session's prompt, for beam search (``contracts.BeamRows``; ``beams``)."""
        from .beams import beam_rows

        return beam_rows(self, width)

    def truncate(self, cache_length: int) -> None:
        if not 0 <= cache_length <= self.cache_length:
            raise ValueError(f"cannot truncate a cache of {self.cache_length} response tokens to {cache_length}")
        self._state.length = len(self.prompt) + cache_length
        del self._response[cache_length:]
        if self._logprobs is not None:
            del self._logprobs[cache_length + 1:]

    def use_threads(self, threads: int) -> None:
        self._state.bind(threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self._model.decode_text(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self._model.encode_text(text)

    def close(self) -> None:
        self._state.close()


class WhisperTarget(WordTimestamps):
    """whisper-base as the verifying target (``backend``: "onnxruntime" or "mnn").

    The int8 target (``whisper-base-int8``) is the same class on the folder
    ``as2d models install whisper-base-int8`` makes.
    """

    # what a request may ask (``Request.features``)
    features = frozenset({"timestamps", "prompt", "hotwords", "word_timestamps", "sampling"})

    def __init__(
        self,
        model_dir: str | Path | None = None,
        backend_device: str = "cpu",
        audio_cache: int = 0,
        preload_threads: Sequence[int] = (),
        backend: str = "onnxruntime",
        install_hint: str = INSTALL_HINT,
    ):
        model_dir = default_models_dir() / "whisper-base" if model_dir is None else model_dir
        self._model = _Model(model_dir, "decoder", backend_device, backend, install_hint=install_hint)
        self._model.audio_cache_size = audio_cache
        self._model.preload(preload_threads)
        self.name: str = self._model.meta["name"]
        self.vocabulary: str = self._model.meta["vocabulary"]
        self.device = backend_device
        self.backend = backend

    @property
    def device_in_use(self) -> list[str]:
        return self._model.device_in_use

    def prepare(self, request: Request, threads: int) -> WhisperTargetSession:
        return WhisperTargetSession(self, request, threads)

    def window_group(self, size: int, threads: int):
        """``size`` windows verified in one call of ``decoder.windows.onnx`` (``window_group``), or None where this
        backend or folder has no windows graph (MNN; a folder converted for the drafter)."""
        from .window_group import WINDOWS_FILE, WhisperWindowGroup

        if self.backend != "onnxruntime" or not (self._model.dir / WINDOWS_FILE).is_file():
            return None
        return WhisperWindowGroup(self, size, threads)

    def detect_language(self, request: Request, threads: int, cross_kv: np.ndarray | None = None) -> str:
        """Whisper's language id: decoder on [SOT], argmax over the language tokens.

        It reads the encoder output the transcription uses (``cross_kv``), as openai-whisper
        does, so detecting costs one decoder step. faster-whisper encodes a second time, on
        features that keep one more STFT frame: half a second a window on 2 cores here, for
        the same language on all 33 dev windows (BENCHMARKS.md section 6).
        """
        names, logits = self._language_logits(request, threads, cross_kv)
        return names[int(np.argmax(logits))]

    def language_probabilities(self, request: Request, threads: int,
                               cross_kv: np.ndarray | None = None) -> dict[str, float]:
        """Each language's probability, likeliest first: the softmax over the language tokens of the step
        ``detect_language`` takes the arg-max of, as openai-whisper's and faster-whisper's detection give it."""
        if not self._model.meta["multilingual"]:
            return {"en": 1.0}
        names, logits = self._language_logits(request, threads, cross_kv)
        values = logits.astype(np.float64)
        probabilities = np.exp(values - values.max())
        probabilities /= probabilities.sum()
        return {names[i]: float(probabilities[i]) for i in np.argsort(-values, kind="stable")}

    def _language_logits(self, request: Request, threads: int,
                         cross_kv: np.ndarray | None) -> tuple[list[str], np.ndarray]:
        """The language codes and their tokens' logits after ``<|startoftranscript|>``."""
        model = self._model
        if cross_kv is None:
            cross_kv = _audio_kv(model, request, threads)
        state = _DecoderState(model, cross_kv, threads)
        try:
            logits = state.append([model.sot])[-1]
        finally:
            state.close()
        names = list(model.language_ids)
        return names, logits[np.asarray([model.language_ids[n] for n in names])]


# --------------------------------------------------------------------------- drafter


class WhisperDraftJob:
    """Greedy tiny.en decoding for one request, from its audio, its prompt and its own history only
    (in timestamp mode under Whisper's timestamp rules, as the target decodes)."""

    def __init__(self, model: _Model, request: Request, threads: int, language: str = "en"):
        self._model = model
        self._state = _DecoderState(model, _audio_kv(model, request, threads), threads)
        self.prompt = model.decoder_prompt(request, language)
        self._rules = model.timestamp_rules if request.timestamps != "none" else None
        self.max_new_tokens = model.max_length - len(self.prompt)
        self.ended_with_eos = False

    def pieces(self) -> Iterator[DraftPiece]:
        model, state = self._model, self._state
        logits = state.append(self.prompt)[-1:]
        drafted: list[int] = []
        for _ in range(self.max_new_tokens):
            row = model.greedy(logits[0], first_step=not drafted)
            if self._rules is not None:
                self._rules.apply(row, drafted)
            tok = int(np.argmax(row))
            drafted.append(tok)
            if tok == model.eot:
                self.ended_with_eos = True
                return
            yield DraftPiece(tokens=(tok,), confidences=(_top_probability(row),))
            if state.length >= model.max_length:
                return
            logits = state.append([tok])

    def close(self) -> None:
        self._state.close()


class WhisperSource:
    """whisper-tiny.en as an English drafter (int8 decoder by default: its precision never affects output).

    On MNN the int8 decoder is ``decoder.int8.mnn`` (MNN weight quantization of the fp32 graph).
    """

    languages = frozenset({"en"})
    tasks = frozenset({"asr"})  # tiny.en cannot translate: a translation runs target-only

    def __init__(
        self,
        model_dir: str | Path | None = None,
        quantized: bool = True,
        backend_device: str = "cpu",
        audio_cache: int = 0,
        preload_threads: Sequence[int] = (),
        backend: str = "onnxruntime",
    ):
        model_dir = default_models_dir() / "whisper-tiny.en" if model_dir is None else model_dir
        self._model = _Model(model_dir, "decoder.int8" if quantized else "decoder", backend_device, backend)
        self._model.audio_cache_size = audio_cache
        self._model.preload(preload_threads)
        self.name: str = self._model.meta["name"]
        self.vocabulary: str = self._model.meta["vocabulary"]
        self.eos_token: int = self._model.eot
        self.timestamp_begin, self.time_precision_s = self._model.timestamp_begin, self._model.time_precision_s
        self.backend = backend
        if self._model.meta["multilingual"]:  # a multilingual model you bring drafts its languages and translation
            self.languages = frozenset(self._model.language_ids)
            self.tasks = frozenset({"asr", "translate"})

    @property
    def device_in_use(self) -> list[str]:
        return self._model.device_in_use

    def prepare(self, request: Request, language: str, threads: int) -> WhisperDraftJob:
        if language not in self.languages:
            raise ValueError(f"{self.name} does not draft {language!r}")
        return WhisperDraftJob(self._model, request, threads, language)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self._model.decode_text(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self._model.encode_text(text)

    def prefix_session(self, request: Request, language: str, threads: int) -> WhisperTargetSession:
        """The drafter as a session that can be fed the committed prefix (serial baselines)."""
        if language not in self.languages:
            raise ValueError(f"{self.name} does not draft {language!r}")
        return WhisperTargetSession(self, request, threads)
