"""Models loaded once, and one transcription at a time per set of them, or ``slots`` at once through a scheduler.

The web layer only calls ``TranscriptionService.transcribe`` with decoded
samples and a ``Cancel`` flag; everything about models, drafter faults and
rebuilding a crashed drafter lives here. Audio of any length goes through the
core's ``Pipeline`` (windows of at most 30 s at pauses), as ``as2d run`` does.
With ``slots`` over 1 the requests share one copy of the models: each decodes in its
own thread and the scheduler (``as2d_core.decode.scheduler``) verifies all of them in
one target call per step; a request admitted beside ``speculate_rows`` others or more
runs target-only. Beam searches step together the same way, every request's hypotheses in one call of the
scheduler's beam wave (where the target makes one).
"""
from __future__ import annotations

import functools
import itertools
import queue
import threading
import time
from collections.abc import Callable

import attrs
import numpy as np

from as2d_core.workers.cleanup import reported
from as2d_core.workers.memory import return_free_memory
from as2d_core.setup.build import (build_parts, build_source, long_form_detector, pipeline_options, source_spec,
                                   windows_detector)
from as2d_core.setup.config import Config, Report
from as2d_core.capabilities import Closable, WindowBatching
from as2d_core.contracts import SAMPLE_RATE, BridgeFactory, Request, Target
from as2d_core.decode.methods import get_method, method_names
from as2d_core.setup.options import SERVE
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.faults import FaultLandingTarget, FaultySource, check_fault
from as2d_core.decode.scheduler import Scheduler, scheduler_for
from as2d_core.decode.wrappers import TargetWrapper
from as2d_core.input.pipeline import Pipeline
from as2d_core.input.transcript import Transcript
from as2d_core.setup.catalog import resolve_bridge
from as2d_core.setup.plugins import load_registry
from as2d_core.setup.source_spec import SourceSpec
from as2d_core.decode.words import prepare_words

from as2d.models import faster_whisper_names

from .cancel import Cancel, _CancellableSession, cancellable_group

MODEL_ALIASES = ("whisper-1",)  # OpenAI's name of its Whisper, which OpenAI clients send


class InputError(ValueError):
    """The request cannot be served as asked; the message names the problem (answered with 400)."""


class _CancellableTarget(TargetWrapper):
    """The loaded target for one request: cancellable calls; a refused request becomes an ``InputError``."""

    def __init__(self, target: Target, cancel: Cancel):
        super().__init__(target)
        self._cancel = cancel
        if isinstance(target, WindowBatching):  # a file's windows in waves stop with the request too
            self.window_group = functools.partial(cancellable_group, target, cancel)

    def prepare(self, request: Request, threads: int):
        self._cancel.check()
        try:
            session = self.inner.prepare(request, threads)
        except ValueError as exc:  # unknown language, unsupported task: the request's fault, not the server's
            raise InputError(f"the target {self.inner.name} refused the request: {exc}") from exc
        return _CancellableSession(session, self._cancel)


@attrs.frozen
class Ask:
    """What one request asks for, already checked."""

    samples: np.ndarray = attrs.field(eq=False, repr=False)
    language: str | None = None
    method: str = "as2d"
    source: str | None = None
    decoding: dict = attrs.field(factory=dict)  # its own decoding options (form.decoding), over the server's
    check: bool = False  # also decode target-only and say whether the tokens are equal
    task: str = "asr"  # translate: POST /v1/audio/translations
    prompt: str | None = None  # Whisper's previous-text prompt, over the server's own (--prompt)
    timestamps: str | None = None  # "segment" (timestamp_granularities segment): Whisper's segments; None: the server's
    format_timestamps: str | None = None  # the response format's mode where the server sets none (segment for srt...)
    stream: bool = False  # stream=true: text as the target commits it, so windows each decoded once (route windows)
    word_timestamps: bool | None = None  # timestamp_granularities word; None: the server's (``word_timestamps``)
    scores: bool = False  # each window's avg_logprob and no_speech_prob (verbose_json's segments)
    temperature: float | None = None  # above 0: sampled at it; 0 or None: the server's temperatures (the fallback)
    vad: dict | None = None  # chunking_strategy: the voice-activity detector's options over the server's (vad_filter)

    @property
    def duration_s(self) -> float:
        return self.samples.size / SAMPLE_RATE


@attrs.define
class Transcription:
    transcript: Transcript
    duration_s: float
    fault: str | None = None  # injected into this request's drafter (None: none, or the drafter never ran)
    words: bool = False  # the windows' words were timed (the request's granularities, or the server's default)
    drafter_rebuilt: bool = False
    batch: dict | None = None  # with slots: the decodes it was admitted beside, whether it drafted, and the rule
    queued_s: float = 0.0
    total_s: float = 0.0

    @property
    def results(self):
        return [w.result for w in self.transcript.windows]

    @property
    def drafter_error(self) -> str | None:
        return next((r.producer_error for r in self.results if r.producer_error), None)


@attrs.define
class ServeSettings:
    # target, default source, method, language, task, instruction and decoding: --config and the flags
    # (``cli.shared.command_config``); ``report``: the file's check, with the devices its parts use here
    config: Config
    report: Report | None = None
    decodes: int = 1  # transcriptions at a time, each with its own copy of the models
    slots: int = SERVE["slots"].default  # transcriptions at a time on one copy, their target calls batched
    speculate_rows: int = SERVE["speculate_rows"].default  # with slots: draft only beside fewer decodes than this
    faults: tuple[str, ...] = ()  # drafter faults to inject, in turn
    fault_every: int = SERVE["fault_every"].default  # inject on every n-th request
    stall_s: float = SERVE["stall_s"].default


@functools.lru_cache(maxsize=8)  # the settings clients use most; any number of settings holds at most 8 detectors
def _request_detectors(options: tuple) -> tuple:
    return windows_detector(dict(options)), long_form_detector(dict(options))


class Worker:
    """One copy of the models, used by one request at a time; sources built on first use and kept."""

    def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.sources: dict[str, object] = {}
        self.bridges: dict[str, BridgeFactory] = {}  # each source's bridge to the target, resolved as it loads
        self.detector = windows_detector()  # voice activity: the speech the windows route cuts into windows
        self.long_form_detector = long_form_detector()  # the speech that the seek route's vad_filter keeps
        self._sources_lock = threading.Lock()  # with slots, requests at once build and drop sources
        self.options = pipeline_options(settings.config)
        self.target, source = build_parts(settings.config, settings.report, with_source=True)
        self.default_source = source_spec(settings.config)
        if source is not None:
            self._keep(self.default_source, source)

    def _keep(self, name: str, source) -> None:
        self.bridges[name] = resolve_bridge(source, self.target)
        self.sources[name] = source

    def source(self, name: str):
        with self._sources_lock:
            if name not in self.sources:
                self._keep(name, build_source(name))
            return self.sources[name], self.bridges[name]

    def detectors(self, vad: dict | None) -> tuple:
        """The voice-activity detectors of a request (the windows' cuts, the seek route's speech): the server's, or
        with its ``chunking_strategy`` options over each one's defaults."""
        return (self.detector, self.long_form_detector) if not vad else _request_detectors(tuple(sorted(vad.items())))

    def drop_source(self, name: str) -> None:
        """Forget a drafter that failed; the next request builds a fresh one."""
        with self._sources_lock:
            source = self.sources.pop(name, None)
            self.bridges.pop(name, None)
        if isinstance(source, Closable):
            reported(source.close, f"closing the drafter {name}")

    def transcribe(self, ask: Ask, cancel: Cancel, fault: str | None,
                   on_text: Callable[[str], None] | None = None, scheduler: Scheduler | None = None,
                   drafts: bool = True) -> Transcription:
        """``on_text`` hears the text as it is committed (``Pipeline.transcribe``), for ``stream=true``; with a
        ``scheduler`` the target's calls are batched with the other requests', and without ``drafts`` a method
        that drafts runs target-only."""
        method = ask.method or self.options.method
        if not drafts and get_method(method).needs_source:
            method = "target-only"
        decode = attrs.evolve(self.options.decode, **ask.decoding)
        decode = decode if ask.prompt is None else attrs.evolve(decode, prompt=ask.prompt)
        decode = decode if not ask.temperature else attrs.evolve(decode, temperature=ask.temperature)
        decode = attrs.evolve(decode, timestamps=ask.timestamps or decode.timestamps or ask.format_timestamps)
        if ask.stream:  # Whisper's long-form seeks may decode a request's end again: its text is final only at its end
            decode = attrs.evolve(decode, route="windows")
        decode = decode if ask.word_timestamps is None else attrs.evolve(decode, word_timestamps=ask.word_timestamps)
        if decode.word_timestamps:
            try:  # loads the aligner once; a target without one is the request's answer, not a server fault
                prepare_words(self.target, decode.target_threads)
            except (ValueError, OSError) as exc:
                raise InputError(f"word timestamps are not available on this server: {exc}") from exc
        base = self.target
        if scheduler is not None:  # beams step in the scheduler's wave, prepared alone; other decodes are its rows
            base = scheduler.beam_target(base) if decode.beam_size > 1 else scheduler.target(base)
        target = _CancellableTarget(base, cancel)
        source = source_name = bridge = None
        if get_method(method).needs_source:
            source_name = ask.source or self.default_source
            if source_name is None:
                raise InputError(f"method {method!r} needs a source and this server has none configured")
            source, bridge = self.source(source_name)
            if fault is not None:  # injected so that it always lands mid-request (faults.FaultLandingTarget)
                source = FaultySource(source, fault, publish_as=self.target.vocabulary, stall_s=self.settings.stall_s)
                bridge = source.bridge(bridge)
                if decode.start == "arrival":
                    target = _CancellableTarget(FaultLandingTarget(base, source), cancel)
        # a fault is injected on the producer's own thread, where it lands before the request can end
        options = attrs.evolve(self.options, method=method, language=ask.language or self.options.language,
                               decode=decode, lookahead=self.options.lookahead and fault is None,
                               task="translate" if ask.task == "translate" else self.options.task,
                               scores=ask.scores)
        detector, long_form = self.detectors(ask.vad)
        pipeline = Pipeline(target, source, options, detector=detector, bridge=bridge, long_form_detector=long_form)
        transcript = pipeline.transcribe(ask.samples, request_id=f"serve-{id(cancel):x}", check=ask.check,
                                         on_text=on_text)
        outcome = Transcription(transcript, ask.duration_s, words=decode.word_timestamps)
        drafted = any(r.source for r in outcome.results)
        outcome.fault = fault if drafted else None
        if outcome.drafter_error and source_name is not None:
            self.drop_source(source_name)
            outcome.drafter_rebuilt = True
        return outcome


class TranscriptionService:
    """A pool of ``decodes`` workers and the checks every request passes before it may take one."""

    def __init__(self, settings: ServeSettings):
        for kind in settings.faults:
            check_fault(kind)
        if settings.slots > 1 and settings.decodes > 1:
            raise ValueError("give --slots (requests at once on one copy of the models) or --decodes (a copy each), "
                             "not both")
        self.settings = settings
        self.workers: queue.Queue[Worker] = queue.Queue()
        for _ in range(settings.decodes):
            self.workers.put(Worker(settings))
        first = self.workers.queue[0]
        self.scheduler = None
        if settings.slots > 1:
            self.scheduler = scheduler_for(first.target, settings.slots, first.options.decode.target_threads,
                                           settings.speculate_rows)
            if self.scheduler is None:
                raise ValueError(f"the target {first.target.name} cannot verify requests together (no windows graph "
                                 "on this backend); use --decodes for requests at once")
        self.concurrency = settings.decodes * settings.slots  # transcriptions at a time
        self.target_name = first.target.name
        # what a request may name as ``model``: the target, OpenAI's name of a Whisper, and faster-whisper's of it
        self.model_names = (self.target_name, *MODEL_ALIASES, *faster_whisper_names(self.target_name))
        self.default_source = first.default_source
        self.method = first.options.method
        self._requests = itertools.count(1)
        self._count_lock = threading.Lock()

    def available_sources(self) -> list[str]:
        from as2d_core.setup import catalog

        registry = load_registry()
        names = [row["name"] for row in (catalog.row(e, registry) for e in catalog.entries("source", registry))
                 if row["available"]]
        if self.default_source and self.default_source not in names:
            names.append(self.default_source)
        return sorted(names)

    def check(self, language: str | None, method: str | None, source: str | None, decoding: dict) -> None:
        """Refuse what no worker could do, before the request waits for one."""
        if method is not None and method not in method_names():
            raise InputError(f"unknown method {method!r}; choose one of {', '.join(method_names())}")
        try:
            DecodeOptions(**decoding)
        except ValueError as exc:  # a value out of its range
            raise InputError(str(exc)) from exc
        if source is not None:
            available = self.available_sources()
            if SourceSpec.parse(source).name not in available and source != self.default_source:
                raise InputError(f"unknown source {source!r}; this server can draft with: {', '.join(available)}")
        if language is not None and (not language.isascii() or not language.isalpha() or len(language) > 8):
            raise InputError(f"unknown language {language!r}; give a language code such as 'en'")

    def next_fault(self) -> str | None:
        faults = self.settings.faults
        if not faults:
            return None
        with self._count_lock:
            number = next(self._requests)
        if number % self.settings.fault_every:
            return None
        return faults[(number // self.settings.fault_every - 1) % len(faults)]

    def transcribe(self, ask: Ask, cancel: Cancel, on_text: Callable[[str], None] | None = None) -> Transcription:
        """Run on a decode thread: take a worker, transcribe, give it back (also when cancelled)."""
        start = time.perf_counter()
        if self.scheduler is not None:  # the one copy of the models, shared by every slot
            try:
                return self._scheduled(ask, cancel, on_text, start)
            finally:
                return_free_memory()
        worker = self.workers.get()
        try:
            cancel.check()
            # a drafter fault breaks decoupled drafting only
            fault = self.next_fault() if get_method(ask.method or self.method).publishes else None
            outcome = worker.transcribe(ask, cancel, fault, on_text)
        finally:
            return_free_memory()
            self.workers.put(worker)
        outcome.total_s = time.perf_counter() - start
        return outcome

    def _scheduled(self, ask: Ask, cancel: Cancel, on_text: Callable[[str], None] | None,
                   start: float) -> Transcription:
        """One slot's transcription: drafting only if the scheduler's rule admits it beside the others."""
        cancel.check()
        with self.scheduler.admit() as admission:
            drafts = admission.drafts and get_method(ask.method or self.method).publishes
            fault = self.next_fault() if drafts else None
            outcome = self.workers.queue[0].transcribe(ask, cancel, fault, on_text, self.scheduler, admission.drafts)
        outcome.batch = {"beside": admission.beside, "drafted": any(r.source for r in outcome.results),
                         "speculate_rows": self.scheduler.speculate_rows}
        outcome.total_s = time.perf_counter() - start
        return outcome
