"""faster-whisper's ``WhisperModel`` on as2d: the same call, the same objects, the target's own output in the same mode.

``from as2d import WhisperModel`` in place of ``from faster_whisper import WhisperModel``: the model is built by
name through the core (``as2d.models``), and ``transcribe`` walks the audio by Whisper's long-form rules as
faster-whisper's sequential ``transcribe`` does (``as2d_core.input.seek``: 30 s requests from a seek offset, the
temperature fallback, beams, conditioning), each request decoded by as2d's drafter and verified by the target, so
the tokens are exactly target-only decoding's in the same mode. It returns faster-whisper's lazy generator of
segments and its info object, with its field names. Options are faster-whisper's, with its defaults
(``as2d.options``); one as2d does not have is refused with a ValueError that names it and says why.
``BatchedInferencePipeline`` (``as2d.batched``) takes the windows route instead.
"""
from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import numpy as np

from as2d_core.cli.progress import AudioProgress
from as2d_core.capabilities import LanguageDetector
from as2d_core.contracts import SAMPLE_RATE, WORD_PUNCTUATION, Recording, Request
from as2d_core.decode.options import DEFAULT_TEMPERATURES, DecodeOptions
from as2d_core.decode.profile import AUTO, NONE, read_profile
from as2d_core.decode.words import words_by_segment
from as2d_core.decode.scores import compression_ratio
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from as2d_core.input.seek import HOP
from as2d_core.input.sequential import fitted_mode, speech_only
from as2d_core.input.transcript import WindowResult
from as2d_core.setup import catalog
from as2d_core.workers.memory import use_one_malloc_arena
from as2d_core.setup.build import (DEFAULT_SOURCE, build_part, build_source, build_together,
                                   target_thread_counts)

from .audio import audio_samples
from .models import INSTALL, resolve_target, unavailable
from .objects import Segment, TranscriptionInfo, VadOptions, Word
from .options import check_options, decode_options, refuse, transcription_options, vad_options
from .vad import speech_detector



class WhisperModel:
    """faster-whisper's ``WhisperModel``, decoding with as2d: the target verifies a small drafter's tokens.

    Several threads may share one model; it decodes one request at a time.
    """

    def __init__(self, model_size_or_path: str, device: str = "auto", device_index: int | list[int] = 0,
                 compute_type: str = "default", cpu_threads: int = 0, num_workers: int = 1,
                 download_root: str | None = None, local_files_only: bool = False, files: dict | None = None,
                 revision: str | None = None, use_auth_token: str | bool | None = None,
                 source: str | None = DEFAULT_SOURCE, profile: str | Path | None = AUTO, **model_kwargs):
        """``source`` and ``profile`` are as2d's own: the drafter (None: target-only), and a device profile
        (``as2d profile``) whose costs decide whether drafting pays on this device (sequential transcription decodes
        one request at a time: it drafts unless the profile prices that above decoding alone); ``"auto"``: this
        machine's own profile of the pair, if ``as2d profile`` made one (``as2d_core.decode.profile``); None: none.

        ``download_root`` and ``revision`` say where faster-whisper downloaded a size as2d has not installed (its
        download cache; None: Hugging Face's) and which snapshot: it is converted once and used, with nothing
        downloaded (``as2d.models.resolve_target``).

        ``num_workers`` is taken as faster-whisper takes it, and changes no token: threads sharing the model take
        turns a window at a time at any value, since one window's decoding already keeps a CPU's cores busy (many
        requests on one target are batched by ``as2d serve``).

        The process's C library (glibc) is asked for one malloc arena from here on, unless ``MALLOC_ARENA_MAX`` is
        set (``as2d_core.workers.memory``)."""
        if device not in ("auto", "cpu"):
            raise unavailable(f"device {device!r} is not available")
        if device_index not in (0, [0]):
            raise refuse("device_index", device_index, "as2d runs on the CPU")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an integer of at least 1, got {num_workers!r}")
        for name, value in (("files", files), ("use_auth_token", use_auth_token)):
            if value is not None:
                raise refuse(name, value, "as2d downloads nothing; its models are installed with "
                                           f"`{INSTALL}` or named by folder")
        if model_kwargs:
            raise ValueError(f"unknown arguments {', '.join(sorted(model_kwargs))}: as2d's targets are not "
                             "CTranslate2 models")
        if cpu_threads < 0:
            raise ValueError(f"cpu_threads must be 0 (as2d's default) or more, got {cpu_threads}")
        use_one_malloc_arena()  # before the models' threads allocate: 60-130 MB less at a call's peak
        name, folder = resolve_target(model_size_or_path, compute_type, download_root, revision)
        if profile not in (None, AUTO, NONE):
            read_profile(profile)  # a file that is no profile fails here, before the models load
        self.decode_options = DecodeOptions(profile=None if profile is None else str(profile),
                                            **({"target_threads": cpu_threads} if cpu_threads else {}))
        # the language detection's encoding serves the first window
        options: dict[str, Any] = {"audio_cache": 1,
                                   "preload_threads": target_thread_counts(self.decode_options, source is not None)}
        if folder is not None:
            options["model_dir"] = folder
        if source is not None:
            catalog.check_pair(source, name)  # a drafter that could never draft for this target, before loading
        # its requests name the language (detected first) unless ``multilingual``: the drafter loads at the niceness
        # of a named language; a guessing one (``DecodeOptions.guess_nice``) loads when first asked for
        drafter = None if source is None else functools.partial(
            build_source, source, preload_nice=(self.decode_options.drafter_nice,))
        self.target, self.source = build_together(functools.partial(build_part, "target", name, **options), drafter)
        self.bridge = catalog.resolve_bridge(self.source, self.target) if self.source is not None else None
        self._lock = threading.RLock()

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
        prepend_punctuations: str = WORD_PUNCTUATION[0],
        append_punctuations: str = WORD_PUNCTUATION[1],
        multilingual: bool = False,
        vad_filter: bool = False,
        vad_parameters: dict | VadOptions | None = None,
        max_new_tokens: int | None = None,
        chunk_length: int | None = None,
        clip_timestamps: str | list[float] = "0",
        hallucination_silence_threshold: float | None = None,
        hotwords: str | None = None,
        language_detection_threshold: float | None = 0.5,
        language_detection_segments: int = 1,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """faster-whisper's ``transcribe``: a generator of segments (each request decoded as it is reached) and the
        info. Without ``language`` the target detects it once, on the first 30 s (or up to
        ``language_detection_segments`` of them, as faster-whisper does; ``multilingual=True``: again on every
        request). ``vad_filter`` decodes only the speech Silero VAD finds, joined, as faster-whisper does."""
        given = dict(locals())
        given.pop("self")
        check_options(given)
        samples = audio_samples(audio)
        if samples.size == 0:
            raise ValueError("the audio is empty")
        decode = decode_options(given, self.decode_options, self.target.vocabulary)
        vad = vad_options(vad_parameters, decode) if decode.filters_speech else None  # clips: no VAD
        options = PipelineOptions(method="as2d" if self.source is not None else "target-only",
                                  task="translate" if task == "translate" else "asr", decode=decode, scores=True)
        with self._lock:
            pipeline = Pipeline(self.target, self.source, options, detector=self._detector(vad), bridge=self.bridge)
            windows, speech_s, detect, notes, route = self._plan(pipeline, samples, vad, language_detection_segments)
            probabilities = None
            if language is None:
                language, probability, probabilities = self._detect_language(detect, options.task,
                                                                             language_detection_threshold)
        if not multilingual:
            pipeline = pipeline.evolve(language=language)
        info = TranscriptionInfo(
            language=language,
            language_probability=probability if probabilities else 1.0,
            duration=samples.size / SAMPLE_RATE,
            duration_after_vad=speech_s,
            all_language_probs=list(probabilities.items()) if probabilities else None,
            transcription_options=transcription_options(given, decode),
            vad_options=vad,
            temperature_fallback=decode.route == "seek" and len(decode.temperature) > 1,
            notes=notes,
            route=route.as_dict(),
        )
        return self._segments(windows(pipeline), samples.size / SAMPLE_RATE, word_timestamps, log_progress), info

    def _plan(self, pipeline: Pipeline, samples: np.ndarray, vad: VadOptions | None, detection_segments: int):
        """The requests to come (lazily, on the pipeline given them: the language may be known only later), the
        seconds of audio they cover, the requests the language is read from (up to ``detection_segments``: the
        consecutive ``chunk_length`` s from the first clip on the seek route, the first windows on the windows
        route), notes on how the audio is cut, and the route they take (``Pipeline.route``)."""
        decode = pipeline.options.decode
        if decode.route == "seek":
            detector = pipeline.detector if vad is not None else None
            audio, _speech = speech_only(samples, detector)
            recording = Recording(audio)  # the language is read from its first 30 s, as the first request
            windows = lambda p: p.decode_long_form(samples, "whisper-model", detector, recording)  # noqa: E731
            notes = [f"Whisper's long-form rules: {decode.chunk_length} s requests from a seek offset, temperatures "
                     f"{', '.join(map(str, decode.temperature))}, beam_size {decode.beam_size}",
                     *fitted_mode(pipeline.target, decode)[1]]
            # faster-whisper reads the language from the first clip's mel frame, and from 0 s where that is past the end
            start = int(decode.clip_timestamps[0] * 100) * HOP if decode.clip_timestamps else 0
            start = start if start < audio.size - HOP else 0
            detect = _language_requests(recording, start, decode.chunk_length, detection_segments)
            return windows, audio.size / SAMPLE_RATE, detect, notes, pipeline.route(0)
        plan = pipeline.plan(samples)  # with vad_filter, the speech joined and cut between spans into windows
        windows = lambda p: p.decode_windows(samples, plan, "whisper-model")  # noqa: E731
        audio = plan.audio(samples)
        detect = [Request("language", audio[w.start : w.end]) for w in plan.windows[:detection_segments]] or [
            Request("language", samples[: decode.chunk_length * SAMPLE_RATE])]
        return (windows, sum(w.end - w.start for w in plan.windows) / SAMPLE_RATE, detect,
                _window_notes(plan, vad, decode.chunk_length), pipeline.route(len(plan.windows)))

    @property
    def supported_languages(self) -> list[str]:
        """The languages the target tells apart, sorted as faster-whisper lists its codes (``["en"]`` for an
        English-only model)."""
        return sorted(self.target.languages) if isinstance(self.target, LanguageDetector) else []

    def detect_language(self, audio: str | BinaryIO | np.ndarray | None = None, features: np.ndarray | None = None,
                        vad_filter: bool = False, vad_parameters: dict | VadOptions | None = None,
                        language_detection_segments: int = 1, language_detection_threshold: float | None = 0.5,
                        ) -> tuple[str, float, list[tuple[str, float]]]:
        """faster-whisper's ``detect_language``: the language, its probability and every language's probability
        (likeliest first), read as ``transcribe`` reads them when given no language: from up to
        ``language_detection_segments`` 30 s segments of ``audio`` (with ``vad_filter``, of its speech joined),
        the first whose likeliest language is over ``language_detection_threshold`` deciding."""
        if audio is None:
            raise ValueError("detect_language reads audio (16 kHz samples, a path or a file object) and computes "
                             "the log-mel itself, as transcribe does; give audio="
                             + (", not features=" if features is not None else ""))
        if language_detection_segments < 1:
            raise ValueError(f"language_detection_segments must be at least 1, got {language_detection_segments}")
        if vad_parameters is not None and not vad_filter:
            raise ValueError("vad_parameters need vad_filter=True (they configure the voice-activity detector)")
        samples = audio_samples(audio)
        if samples.size == 0:
            raise ValueError("the audio is empty")
        if vad_filter:  # faster-whisper's sequential VAD defaults, as its detect_language takes them
            vad = vad_options(vad_parameters, attrs.evolve(self.decode_options, route="seek"))
            samples, _speech = speech_only(samples, speech_detector(vad))
        chunk_length = self.decode_options.chunk_length
        # the log-mel over the segments read, as faster-whisper computes it
        recording = Recording(samples[: language_detection_segments * chunk_length * SAMPLE_RATE])
        detect = _language_requests(recording, 0, chunk_length, language_detection_segments)
        with self._lock:
            language, probability, probabilities = self._detect_language(detect, "asr", language_detection_threshold)
        return language, probability, list(probabilities.items())

    def _detect_language(self, detect: list[Request], task: str,
                         threshold: float | None) -> tuple[str, float, dict[str, float]]:
        """The language, its probability and every language's probability (of the last request read), as
        faster-whisper's ``detect_language`` reads them: request by request, the first whose likeliest language is
        more probable than ``threshold`` decides; if none is, the language likeliest on the most requests (the
        first of equals), with its highest probability."""
        if not isinstance(self.target, LanguageDetector):
            raise ValueError(f"target {self.target.name} does not detect languages; give language=")
        if not detect:
            raise ValueError("no speech was found to detect the language from; give language=")
        votes: dict[str, list[float]] = {}
        for request in detect:
            probabilities = self.target.language_probabilities(attrs.evolve(request, task=task),
                                                               self.decode_options.target_threads)
            language, probability = next(iter(probabilities.items()))
            if threshold is None or probability > threshold:
                return language, probability, probabilities
            votes.setdefault(language, []).append(probability)
        language = max(votes, key=lambda name: len(votes[name]))
        return language, max(votes[language]), probabilities

    def _detector(self, vad: VadOptions | None):
        """The voice-activity detector with ``vad``'s options, or None without VAD."""
        return None if vad is None else speech_detector(vad)

    def _segments(self, windows: Iterator[WindowResult], duration_s: float, word_timestamps: bool,
                  log_progress: bool) -> Iterator[Segment]:
        count = 0
        with AudioProgress(duration_s, log_progress, unit=" seconds") as progress:  # to 100%
            try:
                while True:
                    with self._lock:  # one request at a time on the shared target
                        window = next(windows, None)
                    if window is None:
                        return
                    for segment in [] if window.silent else _window_segments(window, word_timestamps, count):
                        count += 1
                        yield segment
                    progress.advance_to(window.end_s)
            finally:
                windows.close()


def _language_requests(recording: Recording, start: int, chunk_length: int, segments: int) -> list[Request]:
    """The requests the language is read from: up to ``segments`` consecutive ``chunk_length`` s of ``recording``
    from sample ``start``, each with its frames of the recording's log-mel."""
    chunk, audio = chunk_length * SAMPLE_RATE, recording.audio
    return [Request("language", audio[s: s + chunk], recording=recording, offset=s)
            for s in range(start, audio.size, chunk)[:segments]]


def _score(value: float | None) -> float:
    return math.nan if value is None else value


def _window_segments(window: WindowResult, word_timestamps: bool, count: int) -> list[Segment]:
    """A decoded request's (kept) segments as faster-whisper's, numbered after ``count``, with their words."""
    segments = window.segments
    grouped: list = [None] * len(segments)
    if word_timestamps:  # the words of the kept segments, in the file's time, to 10 ms as faster-whisper's
        words = [w.shifted(window.window.start_s) for w in window.result.words]
        if window.speech is not None:  # times in speech joined by vad_filter, back to the file's
            words = window.speech.words(words)
        words = [attrs.evolve(w, start_s=round(w.start_s, 2), end_s=round(w.end_s, 2)) for w in words]
        grouped = words_by_segment(segments, words)
        if window.speech is not None:  # a segment spans its words, as faster-whisper restores it
            segments = [attrs.evolve(s, start_s=group[0].start_s, end_s=group[-1].end_s) if group else s
                        for s, group in zip(segments, grouped)]
    ratio = compression_ratio(window.result.text.strip())  # as faster-whisper: the decoded text, stripped
    temperature = 0.0 if window.temperature is None else window.temperature
    return [Segment(id=count + i + 1, seek=window.window.start // HOP, start=s.start_s, end=s.end_s, text=s.text,
                    tokens=list(s.tokens), avg_logprob=_score(window.result.avg_logprob), compression_ratio=ratio,
                    no_speech_prob=_score(window.result.no_speech_prob), temperature=temperature,
                    words=None if group is None else [Word(w.start_s, w.end_s, w.word, w.probability) for w in group])
            for i, (s, group) in enumerate(zip(segments, grouped))]


def _window_notes(plan, vad: VadOptions | None, chunk_length: int) -> list[str]:
    notes = ["windows route: each window decoded once at the first temperature (no fallback), every window's text "
             "kept (as faster-whisper's batched pipeline, no no-speech rule)"]
    if vad is not None:
        notes.append(f"vad_filter: the speech joined, cut between its spans into windows of at most {chunk_length} s")
    elif plan.detector is None and len(plan.windows) > 1:
        notes.append(f"vad_filter=False: the audio is cut every {chunk_length} s, possibly inside words")
    elif plan.note:  # clips longer than a window
        notes.append(plan.note)
    return notes
