"""faster-whisper's ``WhisperModel`` on as2d: the same call and the same objects, the target's own greedy output.

``from as2d import WhisperModel`` in place of ``from faster_whisper import WhisperModel``: the model is
built by name through the core (``as2d_core.setup.build``), the audio goes through the core's ``Pipeline``
(windows of at most 30 s at pauses, each exactly the target's greedy output, drafted by as2d's
drafter), and ``transcribe`` returns faster-whisper's lazy generator of segments and its info object,
with its field names. An option as2d does not have (beam search, sampling, temperature fallback, a
decoding prefix...) is refused with a ValueError that names it and says why: never ignored. Each segment's
``avg_logprob`` and ``no_speech_prob`` are its window's, computed as faster-whisper computes them
(``as2d_core.decode.scores``), and a window they mark as silence is skipped as faster-whisper skips it.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import numpy as np

from as2d_core.setup import catalog
from as2d_core.cli.progress import AudioProgress
from as2d_core.cli.subtitles import words_by_segment
from as2d_core.input.audio import read_audio
from as2d_core.setup.build import DEFAULT_SOURCE, build_part, build_source
from as2d_core.contracts import SAMPLE_RATE, LanguageDetector, Request
from as2d_core.decode.options import DecodeOptions
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from as2d_core.input.transcript import WindowResult
from as2d_core.setup.imports import import_checkpoint, recognized
from as2d_core.setup.plugins import load_registry
from as2d_core.decode.scores import compression_ratio, is_silent
from as2d_core.input.windows import WindowPlan

# faster-whisper's size names that as2d has a target for, by compute type
SIZES = {"base": {"float32": "whisper-base", "int8": "whisper-base-int8"}}
COMPUTE_TYPES = {"default": "float32", "auto": "float32", "float32": "float32", "int8": "int8",
                 "int8_float32": "int8"}
TARGETS = ("whisper-base", "whisper-base-int8")
INSTALL = "as2d models install whisper-base whisper-base-int8"
# faster-whisper's other size names: as2d downloads none of them; a user converts the weights they bring
OTHER_SIZES = ("tiny", "tiny.en", "base.en", "small", "small.en", "medium", "medium.en", "large-v1", "large-v2",
               "large-v3", "large", "large-v3-turbo", "turbo", "distil-small.en", "distil-medium.en",
               "distil-large-v2", "distil-large-v3", "distil-large-v3.5")
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default: greedy, then fallback
HOP = SAMPLE_RATE // 100  # one mel frame, the unit of faster-whisper's ``seek``
DEFAULT_PUNCTUATION = ("\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")  # faster-whisper's (prepend, append)


@dataclass
class Word:
    start: float
    end: float
    word: str
    probability: float


@dataclass
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float  # the window's, as faster-whisper's: its tokens and end token over len(tokens) + 1
    compression_ratio: float
    no_speech_prob: float  # the window's: the no-speech token at the start of its transcript
    words: list[Word] | None
    temperature: float | None


@dataclass
class VadOptions:
    """The voice-activity detector's options (the Silero VAD plugin's): where long audio is cut."""

    threshold: float = 0.5
    min_silence_duration_ms: int = 500
    speech_pad_ms: int = 300
    max_speech_duration_s: float = 30.0  # a window's limit


@dataclass
class TranscriptionOptions:
    beam_size: int
    best_of: int
    patience: float
    length_penalty: float
    repetition_penalty: float
    no_repeat_ngram_size: int
    log_prob_threshold: float | None
    no_speech_threshold: float | None
    compression_ratio_threshold: float | None
    condition_on_previous_text: bool
    prompt_reset_on_temperature: float
    temperatures: list[float]
    initial_prompt: str | None
    prefix: str | None
    suppress_blank: bool
    suppress_tokens: list[int] | None
    without_timestamps: bool
    max_initial_timestamp: float
    word_timestamps: bool
    prepend_punctuations: str
    append_punctuations: str
    multilingual: bool
    max_new_tokens: int | None
    clip_timestamps: str | list[float]
    hallucination_silence_threshold: float | None
    hotwords: str | None


@dataclass
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: TranscriptionOptions
    vad_options: VadOptions | None
    # as2d's own: greedy decoding only, so faster-whisper's temperature fallback (re-decoding a window
    # whose compression ratio or log-probability fails its threshold) is off; what else differs, in words
    temperature_fallback: bool = False
    notes: list[str] = field(default_factory=list)


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """faster-whisper's ``format_timestamp``: ``[HH:]MM:SS.mmm``."""
    if seconds < 0:
        raise ValueError(f"non-negative timestamp expected, got {seconds}")
    milliseconds = round(seconds * 1000.0)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    seconds, milliseconds = divmod(milliseconds, 1_000)
    hours_marker = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_marker}{minutes:02d}:{seconds:02d}{decimal_marker}{milliseconds:03d}"


def decode_audio(input_file: str | Path | BinaryIO, sampling_rate: int = SAMPLE_RATE, split_stereo: bool = False):
    """faster-whisper's ``decode_audio``: 16 kHz mono float32 samples of any file FFmpeg reads (``as2d_core.input.audio``)."""
    if sampling_rate != SAMPLE_RATE or split_stereo:
        raise ValueError(f"decode_audio gives {SAMPLE_RATE} Hz mono, the models' input; sampling_rate="
                         f"{sampling_rate} and split_stereo={split_stereo} are not supported")
    return _samples(input_file)


def available_models() -> list[str]:
    """The names ``WhisperModel`` takes: faster-whisper's sizes that as2d has a target for, and its targets."""
    return [*SIZES, *TARGETS]


def _samples(audio) -> np.ndarray:
    if isinstance(audio, np.ndarray):
        return np.asarray(audio, dtype=np.float32).reshape(-1)
    if isinstance(audio, (str, Path)):
        return read_audio(audio).samples
    if isinstance(audio, (bytes, bytearray)):
        return read_audio(bytes(audio)).samples
    if isinstance(audio, io.IOBase) or hasattr(audio, "read"):
        return read_audio(audio.read()).samples
    raise TypeError(f"audio must be a path, a file object or 16 kHz float32 samples, not {type(audio).__name__}")


def _installed_targets(names: Sequence[str] = TARGETS) -> list[str]:
    registry = load_registry()
    rows = (catalog.row(entry, registry) for entry in catalog.entries("target", registry))
    return [row["name"] for row in rows if row["available"] and row["name"] in names]


def _unavailable(what: str) -> ValueError:
    installed = ", ".join(_installed_targets()) or "none"
    return ValueError(f"{what}; as2d runs faster-whisper's size 'base' on the CPU: compute_type 'default' or "
                      f"'float32' is whisper-base, 'int8' is whisper-base-int8 (installed here: {installed}; "
                      f"install with `{INSTALL}`), or give an as2d model folder")


def _no_weights(size: str, targets: list[str]) -> ValueError:
    return ValueError(f"as2d has no Whisper {size!r} installed (targets here: {', '.join(targets) or 'none'}) and "
                      f"downloads nothing: get its weights (a faster-whisper/CTranslate2 folder, a Hugging Face Whisper "
                      f"folder or openai-whisper's {size}.pt), then run `as2d models install --from PATH --name "
                      f"whisper-{size}` and give WhisperModel('whisper-{size}'), or give WhisperModel(PATH)")


def _float32_only(name: str, compute_type: str) -> None:
    """Only whisper-base has an int8 target; any other model runs as converted (float32)."""
    if COMPUTE_TYPES[compute_type] != "float32" and name not in TARGETS:
        raise ValueError(f"compute_type {compute_type!r}: {name} runs in float32 (of the int8 targets as2d has only "
                         "whisper-base-int8); give compute_type='default'")


def resolve_target(model_size_or_path: str | Path, compute_type: str) -> tuple[str, Path | None]:
    """The registered target (and its folder, when a path is given) for faster-whisper's model and compute type.

    A checkpoint (a faster-whisper folder, a Hugging Face folder, an openai-whisper .pt) is converted into the
    models folder the first time, then reused (``as2d_core.setup.imports``)."""
    if compute_type not in COMPUTE_TYPES:
        raise _unavailable(f"compute_type {compute_type!r} is not available")
    precision = COMPUTE_TYPES[compute_type]
    path = Path(model_size_or_path).expanduser()
    if path.exists() and recognized(path) is not None:
        _float32_only(path.name, compute_type)
        folder = import_checkpoint(path)
        return folder.name, folder
    targets = load_registry().names("target")
    if path.is_dir():
        meta = path / "model.json"
        if not meta.is_file():
            raise _unavailable(f"{path} is not an as2d model folder (it has no model.json) nor a Whisper checkpoint")
        name = json.loads(meta.read_text()).get("name")
        if name not in targets:
            raise _unavailable(f"{path} holds {name!r}, which is not a registered target")
        if name in TARGETS and compute_type not in ("default", "auto") and SIZES["base"][precision] != name:
            raise ValueError(f"{path} holds {name}; compute_type {compute_type!r} asks for "
                             f"{SIZES['base'][precision]}: give compute_type='default' or that model's folder")
        _float32_only(name, compute_type)
        return name, path
    name = str(model_size_or_path)
    if name in TARGETS:
        return name, None
    if name in SIZES:
        return SIZES[name][precision], None
    installed = next((n for n in (name, f"whisper-{name}") if n in targets), None)  # one the user converted
    if installed is not None:
        _float32_only(installed, compute_type)
        return installed, None
    if name in OTHER_SIZES:
        raise _no_weights(name, _installed_targets(targets))
    raise _unavailable(f"as2d has no target for the Whisper model {name!r}")


def _refuse(name: str, value: Any, why: str) -> ValueError:
    return ValueError(f"{name}={value!r} is not supported: {why}")


def check_options(given: dict[str, Any]) -> None:
    """Refuse every option whose value asks for something as2d does not do (a ValueError naming it and why).

    ``best_of``, ``prompt_reset_on_temperature`` and ``language_detection_threshold`` take any value: they act
    only in sampling, after a temperature rise, or with several detection segments, none of which as2d does.
    """
    greedy = "as2d decodes greedily, one hypothesis (beam_size=1), so its tokens are the target's own greedy output"
    if given["beam_size"] != 1:
        raise _refuse("beam_size", given["beam_size"], greedy)
    for name, default, why in (
        ("patience", 1, "it is a beam-search option; " + greedy),
        ("length_penalty", 1, "it is a beam-search option; " + greedy),
        ("repetition_penalty", 1, "it changes the scores; " + greedy),
        ("no_repeat_ngram_size", 0, "it bans tokens; " + greedy),
        ("prefix", None, "as2d does not force a decoding prefix; give it as initial_prompt (previous text) instead"),
        ("max_new_tokens", None, "as2d decodes each window to its end token or the model's context"),
        ("chunk_length", None, "as2d's windows are Whisper's 30 s, cut at pauses"),
        ("clip_timestamps", "0", "as2d transcribes the whole audio; slice the samples instead"),
        ("hallucination_silence_threshold", None, "as2d does not skip silences by word timestamps"),
        ("language_detection_segments", 1, "as2d detects the language on the first window"),
        ("max_initial_timestamp", 1.0, "as2d's timestamp rules are Whisper's, with the first timestamp at most 1 s"),
        ("suppress_blank", True, "the targets always suppress a blank start, as faster-whisper does by default"),
    ):
        if given[name] != default:
            raise _refuse(name, given[name], why)
    if given["suppress_tokens"] not in ([-1], (-1,)):
        raise _refuse("suppress_tokens", given["suppress_tokens"],
                      "the targets suppress faster-whisper's default set ([-1]) and no other")
    if given["compression_ratio_threshold"] not in (None, 2.4):  # it only starts the fallback
        raise _refuse("compression_ratio_threshold", given["compression_ratio_threshold"],
                      "as2d has no temperature fallback; leave it at faster-whisper's default (2.4) or None")
    if (given["prepend_punctuations"], given["append_punctuations"]) != DEFAULT_PUNCTUATION:
        raise ValueError("prepend_punctuations and append_punctuations are not supported: the word timestamps "
                         "join faster-whisper's default punctuation to its words")
    temperature = given["temperature"]
    temperatures = tuple(temperature) if isinstance(temperature, (list, tuple)) else (temperature,)
    if temperatures not in ((0,), DEFAULT_TEMPERATURES):
        raise _refuse("temperature", temperature, "as2d decodes greedily (temperature 0) without fallback; "
                                                  "give 0 (faster-whisper's default tuple is taken as 0)")
    if given["task"] not in ("transcribe", "translate"):
        raise ValueError(f"unknown task {given['task']!r}; choose 'transcribe' or 'translate'")
    prompt = given["initial_prompt"]
    if prompt is not None and not isinstance(prompt, str):
        raise _refuse("initial_prompt", prompt, "give the prompt as text; as2d encodes it with the target's tokenizer")
    if given["vad_parameters"] is not None and not given["vad_filter"]:
        raise ValueError("vad_parameters need vad_filter=True (they configure the voice-activity detector)")


def vad_options(parameters: dict | Any | None) -> VadOptions:
    """The detector's options from faster-whisper's ``vad_parameters`` (a dict or its ``VadOptions``)."""
    if parameters is None:
        return VadOptions()
    given = dict(parameters) if isinstance(parameters, dict) else (
        dataclasses.asdict(parameters) if dataclasses.is_dataclass(parameters) else dict(vars(parameters)))
    fixed = {"neg_threshold": None, "min_speech_duration_ms": 0, "max_speech_duration_s": math.inf}
    ours = {f.name for f in dataclasses.fields(VadOptions)} - {"max_speech_duration_s"}
    for name, value in given.items():
        if name in ours:
            continue
        if name not in fixed:
            raise ValueError(f"unknown VAD parameter {name!r}; as2d's detector takes {', '.join(sorted(ours))}")
        if value != fixed[name]:
            raise _refuse(f"vad_parameters[{name!r}]", value, f"as2d's detector takes only {', '.join(sorted(ours))}")
    return VadOptions(**{k: v for k, v in given.items() if k in ours})


class WhisperModel:
    """faster-whisper's ``WhisperModel``, decoding with as2d: the target verifies a small drafter's tokens.

    ``source`` (as2d's own argument) names the drafter, None for target-only decoding. Several threads may
    share one model; it decodes one window at a time.
    """

    def __init__(self, model_size_or_path: str, device: str = "auto", device_index: int | list[int] = 0,
                 compute_type: str = "default", cpu_threads: int = 0, num_workers: int = 1,
                 download_root: str | None = None, local_files_only: bool = False, files: dict | None = None,
                 revision: str | None = None, use_auth_token: str | bool | None = None,
                 source: str | None = DEFAULT_SOURCE, **model_kwargs):
        if device not in ("auto", "cpu"):
            raise _unavailable(f"device {device!r} is not available")
        if device_index not in (0, [0]):
            raise _refuse("device_index", device_index, "as2d runs on the CPU")
        if num_workers != 1:
            raise _refuse("num_workers", num_workers, "one model decodes one window at a time; "
                                                      "create one model per worker")
        for name, value in (("download_root", download_root), ("files", files), ("revision", revision),
                            ("use_auth_token", use_auth_token)):
            if value is not None:
                raise _refuse(name, value, "as2d downloads nothing; its models are installed with "
                                           f"`{INSTALL}` or named by folder")
        if model_kwargs:
            raise ValueError(f"unknown arguments {', '.join(sorted(model_kwargs))}: as2d's targets are not "
                             "CTranslate2 models")
        if cpu_threads < 0:
            raise ValueError(f"cpu_threads must be 0 (as2d's default) or more, got {cpu_threads}")
        name, folder = resolve_target(model_size_or_path, compute_type)
        options: dict[str, Any] = {"audio_cache": 1}  # the language detection's encoding serves the first window
        if folder is not None:
            options["model_dir"] = folder
        self.target = build_part("target", name, **options)
        if source is not None:
            catalog.check_pair(source, name)  # a drafter that could never draft for this target, before loading
        self.source = build_source(source) if source is not None else None
        self.bridge = catalog.resolve_bridge(self.source, self.target) if self.source is not None else None
        self.decode_options = DecodeOptions() if cpu_threads == 0 else DecodeOptions(target_threads=cpu_threads)
        self._lock = threading.RLock()
        self._detectors: dict[tuple, Any] = {}

    def transcribe(
        self,
        audio: str | BinaryIO | np.ndarray,
        language: str | None = None,
        task: str = "transcribe",
        log_progress: bool = False,
        beam_size: int = 1,
        best_of: int = 5,
        patience: float = 1,
        length_penalty: float = 1,
        repetition_penalty: float = 1,
        no_repeat_ngram_size: int = 0,
        temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
        compression_ratio_threshold: float | None = 2.4,
        log_prob_threshold: float | None = -1.0,
        no_speech_threshold: float | None = 0.6,
        condition_on_previous_text: bool = True,
        prompt_reset_on_temperature: float = 0.5,
        initial_prompt: str | Iterable[int] | None = None,
        prefix: str | None = None,
        suppress_blank: bool = True,
        suppress_tokens: list[int] | None = (-1,),
        without_timestamps: bool = False,
        max_initial_timestamp: float = 1.0,
        word_timestamps: bool = False,
        prepend_punctuations: str = DEFAULT_PUNCTUATION[0],
        append_punctuations: str = DEFAULT_PUNCTUATION[1],
        multilingual: bool = False,
        vad_filter: bool = True,
        vad_parameters: dict | VadOptions | None = None,
        max_new_tokens: int | None = None,
        chunk_length: int | None = None,
        clip_timestamps: str | list[float] = "0",
        hallucination_silence_threshold: float | None = None,
        hotwords: str | None = None,
        language_detection_threshold: float | None = 0.5,
        language_detection_segments: int = 1,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """faster-whisper's ``transcribe``: a generator of segments (each window decoded as it is reached) and
        the info. Greedy decoding only (``beam_size=1``, the default here); ``vad_filter`` (default on) cuts
        audio over 30 s at pauses, off cuts it every 30 s. Without ``language`` the target detects it once,
        on the first window (``multilingual=True``: again on every window)."""
        given = dict(locals())
        given.pop("self")
        check_options(given)
        vad = vad_options(vad_parameters) if vad_filter else None
        samples = _samples(audio)
        if samples.size == 0:
            raise ValueError("the audio is empty")
        decode = attrs.evolve(self.decode_options, timestamps="none" if without_timestamps else "segment",
                              prompt=initial_prompt, hotwords=hotwords,
                              condition_on_previous_text=condition_on_previous_text, word_timestamps=word_timestamps)
        options = PipelineOptions(method="as2d" if self.source is not None else "target-only",
                                  task="translate" if task == "translate" else "asr", decode=decode, scores=True)
        with self._lock:
            pipeline = Pipeline(self.target, self.source, options, detector=self._detector(vad),
                                bridge=self.bridge)
            plan = pipeline.plan(samples)
            first = samples[plan.windows[0].start : plan.windows[0].end] if plan.windows else samples[: 30 * SAMPLE_RATE]
            probabilities = None
            if language is None:
                probabilities = self._language_probabilities(first, options)
                language = next(iter(probabilities))
        if not multilingual:
            pipeline.options = attrs.evolve(options, language=language)
        info = TranscriptionInfo(
            language=language,
            language_probability=probabilities[language] if probabilities else 1.0,
            duration=samples.size / SAMPLE_RATE,
            duration_after_vad=sum(w.end - w.start for w in plan.windows) / SAMPLE_RATE,
            all_language_probs=list(probabilities.items()) if probabilities else None,
            transcription_options=_options(given),
            vad_options=vad,
            notes=_notes(plan, vad),
        )
        silent = functools.partial(_silent, no_speech_threshold=no_speech_threshold,
                                   log_prob_threshold=log_prob_threshold)
        return self._segments(pipeline, samples, plan, word_timestamps, silent, log_progress), info

    def _language_probabilities(self, samples: np.ndarray, options: PipelineOptions) -> dict[str, float]:
        if not isinstance(self.target, LanguageDetector):
            raise ValueError(f"target {self.target.name} does not detect languages; give language=")
        request = Request("language", samples, task=options.task)
        return self.target.language_probabilities(request, self.decode_options.target_threads)

    def _detector(self, vad: VadOptions | None):
        """The voice-activity detector with ``vad``'s options (built once per options), or None without VAD."""
        if vad is None:
            return None
        key = dataclasses.astuple(vad)
        if key not in self._detectors:
            registry = load_registry()
            names = registry.names("detector")
            if not names:
                raise ValueError("vad_filter needs a voice-activity detector: pip install ./plugins/silero_vad "
                                 "(or vad_filter=False: audio over 30 s is then cut every 30 s)")
            self._detectors[key] = registry.get("detector", names[0]).factory(
                {"threshold": vad.threshold, "min_silence_ms": vad.min_silence_duration_ms,
                 "pad_ms": vad.speech_pad_ms})
        return self._detectors[key]

    def _segments(self, pipeline: Pipeline, samples: np.ndarray, plan: WindowPlan, word_timestamps: bool,
                  silent: Callable[[Any], bool], log_progress: bool) -> Iterator[Segment]:
        windows = pipeline.decode_windows(samples, plan, "whisper-model", silent)
        count = 0
        with AudioProgress(samples.size / SAMPLE_RATE, log_progress, unit=" seconds") as progress:  # to 100%
            try:
                while True:
                    with self._lock:  # one window at a time on the shared target
                        window = next(windows, None)
                    if window is None:
                        return
                    for segment in [] if window.silent else _window_segments(window, word_timestamps, count):
                        count += 1
                        yield segment
                    progress.advance_to(window.end_s)
            finally:
                windows.close()


def _silent(result, no_speech_threshold: float | None, log_prob_threshold: float | None) -> bool:
    """faster-whisper's no-speech rule on a decoded window (``as2d_core.decode.scores.is_silent``)."""
    if result.no_speech_prob is None:  # a target that keeps no scores: nothing to judge by
        return False
    return is_silent(result.avg_logprob, result.no_speech_prob, no_speech_threshold, log_prob_threshold)


def _score(value: float | None) -> float:
    return math.nan if value is None else value


def _window_segments(window: WindowResult, word_timestamps: bool, count: int) -> list[Segment]:
    """A decoded window's segments as faster-whisper's, numbered after ``count``, with their words."""
    segments = window.segments
    words = [w.shifted(window.start_s) for w in window.result.words] if word_timestamps else []
    grouped = words_by_segment(segments, words) if word_timestamps else [None] * len(segments)
    ratio = compression_ratio(window.result.text.strip())  # as faster-whisper: the decoded text, stripped
    return [Segment(id=count + i + 1, seek=window.window.start // HOP, start=s.start_s, end=s.end_s, text=s.text,
                    tokens=list(s.tokens), avg_logprob=_score(window.result.avg_logprob), compression_ratio=ratio,
                    no_speech_prob=_score(window.result.no_speech_prob), temperature=0.0,
                    words=None if group is None else [Word(w.start_s, w.end_s, w.word, w.probability) for w in group])
            for i, (s, group) in enumerate(zip(segments, grouped))]


def _options(given: dict[str, Any]) -> TranscriptionOptions:
    """faster-whisper's options record with what as2d does: greedy, no fallback."""
    names = {f.name for f in dataclasses.fields(TranscriptionOptions)}
    values = {k: v for k, v in given.items() if k in names}
    values.update(temperatures=[0.0], suppress_tokens=list(given["suppress_tokens"]))
    return TranscriptionOptions(**values)


def _notes(plan: WindowPlan, vad: VadOptions | None) -> list[str]:
    notes = ["greedy decoding (temperature 0) without temperature fallback; a window whose no_speech_prob is over "
             "no_speech_threshold is skipped as silence unless its avg_logprob is over log_prob_threshold"]
    if vad is None and len(plan.windows) > 1:
        notes.append("vad_filter=False: the audio is cut every 30 s, possibly inside words")
    elif plan.note:
        notes.append(plan.note)
    if vad is not None and plan.detector is None:
        notes.append("the audio fits in one window: decoded whole, no silence removed")
    return notes
