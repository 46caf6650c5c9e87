"""The Whisper target: verifies a root plus candidates in one decoder call, in the request's mode.

In timestamp mode each verified position's logits get Whisper's timestamp rules; at a temperature above 0 the
token is sampled with noise drawn from the request's seed and the token's position (``as2d_core.decode.sampling``),
so a batched verification chooses what one step at a time would.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.contracts import Request
from as2d_core.decode.sampling import Sampling
from as2d_core.decode.scores import chosen_logprobs
from as2d_core.setup.paths import models_dir as default_models_dir

from .alignment import WordTimestamps
from .masks import ScoreMasks
from .model_files import DecoderState, ModelFiles, probability, top_probability
from .vocabulary import INSTALL_HINT


def response_room(max_length: int, prompt_length: int, asked: int | None, forced: int = 0) -> int:
    """How many response tokens a session allows after a ``forced`` start, as CTranslate2 bounds faster-whisper's:
    of the length allowed (the model's context, or the prompt, the forced start and ``asked``, faster-whisper's
    ``max_new_tokens``), half, and no more than what follows the prompt's last token (so a plain response stops
    at 224 tokens, as openai-whisper's ``sample_len``), the forced tokens counted in it (at least one token is
    left). A prompt and ``asked`` over the context are refused, as faster-whisper refuses them."""
    given = prompt_length + forced
    if asked is not None and given + asked > max_length:
        raise ValueError(f"the prompt is {given} tokens and max_new_tokens {asked}: together "
                         f"{given + asked}, over the model's {max_length}-token context; give a shorter prompt "
                         f"or a smaller max_new_tokens")
    allowed = max_length if asked is None else given + asked
    return max(1, min(allowed // 2, allowed - prompt_length + 1) - forced)


class WhisperTargetSession:
    """One request on the target: prompt prefilled, verify appends root + candidates.

    Each verified position's logits get the request's masks for the response up to that position
    (``masks.ScoreMasks``: the suppressions, the request's score rules and, in timestamp mode, Whisper's
    timestamp rules): the session keeps the response tokens in its cache for that, so a batched
    verification decides as one step at a time would. A request at a
    temperature above 0 is sampled with noise drawn from its seed and each token's position
    (``as2d_core.decode.sampling``), so a batched verification draws what one step at a time would. For a
    request that asks (``Request.scores``) it also keeps each chosen token's log-probability and the
    no-speech probability (``capabilities.ResponseScores``), as CTranslate2 computes them for faster-whisper.
    """

    def __init__(self, target: "WhisperTarget", request: Request, threads: int):
        model = self.model = target.model
        if request.task not in ("asr", "translate"):
            raise ValueError(f"whisper supports the tasks 'asr' and 'translate', not {request.task!r}")
        language = request.language
        if not model.meta["multilingual"] and (language not in (None, "en") or request.task != "asr"):
            raise ValueError(f"{model.meta['name']} only transcribes English")
        model.check_prompt(request)  # before the encoder runs
        cross = model.audio_kv(request, threads)
        if request.word_timestamps and isinstance(target, WordTimestamps):
            target.keep_audio(request, cross)  # the words' pass after decoding reads the same encoding
        if model.meta["multilingual"]:
            if language is None:
                language = target.detect_language(request, threads, cross)
            if language not in model.language_ids:
                raise ValueError(f"{model.meta['name']} has no language {language!r}")
        else:
            language = "en"
        prompt = model.decoder_prompt(request, language)
        forced = model.forced_tokens(request)
        self.prompt = prompt + forced  # the forced prefix is prefilled with the prompt; the response follows it
        self.forced_tokens = forced  # ``capabilities.ForcedStart``: the result's tokens begin with them
        self.language = language
        self.eos_token = model.eot
        self.vocab_size = model.n_vocab
        self.timestamp_begin, self.time_precision_s = model.timestamp_begin, model.time_precision_s
        self.masks = ScoreMasks(model, request, forced)
        self._sampling = Sampling(request.temperature, request.seed)
        self._response: list[int] = []  # the response tokens in the cache, for the masks
        self.max_new_tokens = response_room(model.max_length, len(prompt), request.max_new_tokens, len(forced))
        self.state = DecoderState(model, cross, threads)
        logits = self.state.append(self.prompt)
        self._no_speech = None  # with scores: at <|startoftranscript|>, before the suppressions edit the logits
        if request.scores:
            self._no_speech = probability(logits[self.prompt.index(model.sot)], model.special["no_speech"])
        first_row = self.masks.first(logits[-1])
        self._first = self._sampling.choose(first_row[None], 0)[0]
        self.first_row = first_row.copy()  # beam search starts from it (``beam_rows``); the buffer is reused
        self._first_confidence = top_probability(first_row)
        # with scores: the first token's log-probability, then the chosen token's after each cached position
        self._logprobs = chosen_logprobs(first_row[None], [self._first]) if request.scores else None

    @property
    def cache_length(self) -> int:
        """Response tokens in the cache (the prompt is not counted)."""
        return self.state.length - len(self.prompt)

    @property
    def device_in_use(self) -> list[str]:
        return self.state.devices

    def first_token(self) -> int:
        return self._first

    def _appended(self, root: int, candidates: Sequence[int]) -> tuple[list[int], np.ndarray]:
        appended = [int(root), *(int(c) for c in candidates)]
        return appended, self.state.append(appended)

    def chosen(self, appended: list[int], logits: np.ndarray) -> list[int]:
        """The token after each position of ``appended`` (just added to the cache; ``logits``: the decoder's
        [K, vocab] for them): the suppressions and rules applied, then the request's choice (greedy or seeded
        sampling), the response extended (a window group's call hands its rows here)."""
        position = len(self._response) + 1  # the response position the first row scores
        self.masks.rows(logits, self._response, appended)
        self._response += appended
        tokens = self._sampling.choose(logits, position)
        if self._logprobs is not None:
            self._logprobs += chosen_logprobs(logits, tokens)
        return tokens

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        return self.chosen(*self._appended(root, candidates))

    def verify_with_confidence(self, root: int, candidates: Sequence[int]) -> tuple[list[int], list[float]]:
        """Like verify, plus the probability of each greedy token (SpecASR's stopping rule needs it)."""
        appended, logits = self._appended(root, candidates)
        tokens = self.chosen(appended, logits)  # the rules edit ``logits`` in place
        return tokens, [top_probability(row) for row in logits[: len(tokens)]]

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

    def beam_rows(self, width: int, as_verified: bool = False):
        """``width`` hypotheses from this session's prompt, for beam search or samples side by side
        (``capabilities.BeamRows``; ``beams``)."""
        from .beams import beam_rows

        return beam_rows(self, width, as_verified)

    def truncate(self, cache_length: int) -> None:
        if not 0 <= cache_length <= self.cache_length:
            raise ValueError(f"cannot truncate a cache of {self.cache_length} response tokens to {cache_length}")
        self.state.length = len(self.prompt) + cache_length
        del self._response[cache_length:]
        if self._logprobs is not None:
            del self._logprobs[cache_length + 1:]

    def use_threads(self, threads: int) -> None:
        self.state.bind(threads)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.model.decode_text(tokens)

    def encode_text(self, text: str) -> list[int]:
        return self.model.encode_text(text)

    def close(self) -> None:
        self.state.close()


class WhisperTarget(WordTimestamps):
    """whisper-base as the verifying target (``backend``: "onnxruntime" or "mnn").

    The int8 target (``whisper-base-int8``) is the same class on the folder
    ``as2d models install whisper-base-int8`` makes.
    """

    # what a request may ask (``Request.features``)
    features = frozenset({"timestamps", "prompt", "hotwords", "word_timestamps", "sampling", "prefix", "score_rules",
                          "punctuations"})

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
        self.model = ModelFiles(model_dir, "decoder", backend_device, backend, install_hint=install_hint)
        self.model.audio_cache_size = audio_cache
        # the target encodes on all its threads, alone or beside a drafter started at arrival, and decodes on
        # fewer beside a drafter: its encoder is built for the most threads only (one session less to load)
        self.model.preload(preload_threads, encoder_threads=[max(preload_threads)] if preload_threads else [])
        self.name: str = self.model.meta["name"]
        self.vocabulary: str = self.model.meta["vocabulary"]
        # ``LanguageDetector``: the languages it tells apart, in Whisper's order (an English-only model knows one)
        self.languages: tuple[str, ...] = tuple(self.model.language_ids) if self.model.meta["multilingual"] \
            else ("en",)
        self.device = backend_device
        self.backend = backend

    @property
    def device_in_use(self) -> list[str]:
        return self.model.device_in_use

    def encode_text(self, text: str) -> list[int]:  # ``TextEncoder``
        return self.model.encode_text(text)

    def prepare(self, request: Request, threads: int) -> WhisperTargetSession:
        return WhisperTargetSession(self, request, threads)

    def window_group(self, size: int, threads: int):
        """``size`` windows verified in one call of ``decoder.windows.onnx`` (``window_group``), or None where this
        backend or folder has no windows graph (MNN; a folder converted for the drafter)."""
        from .window_group import WINDOWS_FILE, WhisperWindowGroup

        if self.backend != "onnxruntime" or not (self.model.dir / WINDOWS_FILE).is_file():
            return None
        return WhisperWindowGroup(self, size, threads)

    def beam_wave(self, size: int, width: int, threads: int):
        """Up to ``size`` windows' beam searches stepping in one call of a windows graph (``beams``): the int8
        target's own for beams (``decoder.windows.beams.onnx``, its layers in int8 as its beams graph's,
        ``convert.quantize``), else ``decoder.windows.onnx``; None on another backend, or where the folder lacks
        that graph (an int8 folder made before it)."""
        from .beams import WhisperBeamWave
        from .graph_io import BEAM_WAVE_FILE, WINDOWS_FILE

        graph = BEAM_WAVE_FILE if "int8" in self.model.meta else WINDOWS_FILE
        if self.backend != "onnxruntime" or not (self.model.dir / graph).is_file():
            return None
        return WhisperBeamWave(self.model, size, width, threads, graph)

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
        if not self.model.meta["multilingual"]:
            return {"en": 1.0}
        names, logits = self._language_logits(request, threads, cross_kv)
        values = logits.astype(np.float64)
        probabilities = np.exp(values - values.max())
        probabilities /= probabilities.sum()
        return {names[i]: float(probabilities[i]) for i in np.argsort(-values, kind="stable")}

    def _language_logits(self, request: Request, threads: int,
                         cross_kv: np.ndarray | None) -> tuple[list[str], np.ndarray]:
        """The language codes and their tokens' logits after ``<|startoftranscript|>``."""
        model = self.model
        if cross_kv is None:
            cross_kv = model.audio_kv(request, threads)
        state = DecoderState(model, cross_kv, threads)
        try:
            logits = state.append([model.sot])[-1]
        finally:
            state.close()
        names = list(model.language_ids)
        return names, logits[np.asarray([model.language_ids[n] for n in names])]
