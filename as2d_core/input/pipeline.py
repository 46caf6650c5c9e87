"""Whole files and sustained streams on resident models: the Python API behind ``as2d run`` and ``as2d stream``.

Load the models once, then transcribe many files or streams::

    from as2d_core.setup.build import pipeline_from_config

    pipeline = pipeline_from_config("configs/whisper-asr.toml")
    transcript = pipeline.transcribe("talk.mp3")
    print(transcript.text)
    for window in transcript.windows:
        print(window.start_s, window.end_s, window.text)

A file is cut into windows of at most 30 s at pauses (``windows``); every window is one
request to the engine, so each window's tokens are exactly the target's greedy output on
that window (``check=True`` proves it per window). With a drafter, the next window is
drafted while the target still verifies this one (``lookahead``). One pipeline runs one
decode at a time (a lock); use one pipeline per concurrent caller.

Each window's segments (``WindowResult.segments``: Whisper's timestamp segments in timestamp mode,
else the window) carry times in the whole file; ``Transcript.segments`` numbers them all. The
user's prompt goes to every window, as faster-whisper's batched pipeline gives its ``initial_prompt``
(Whisper's long form gives it to its first request); with ``condition_on_previous_text`` every
window also gets the text of the windows before it, which the target commits only at that window's
end, so that window is drafted only once it starts.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import attrs
import numpy as np

from as2d_core.input.audio import AudioInfo, DecodedAudio, mono_samples, read_audio
from as2d_core.capabilities import BeamWave, BeamWaves, WindowBatching, WindowGroup, drafts_one_job_at_a_time
from as2d_core.decode.profile import cached_profile, profile_path
from as2d_core.decode.scheduler import drafting_pays_alone, speculate_rows_from, wave_prices
from as2d_core.contracts import SAMPLE_RATE, BridgeFactory, Recording, Request, Source, Target, TokenPrompt
from as2d_core.decode.deltas import TextDeltas
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.loop import OnCommit
from as2d_core.decode.methods import get_method
from as2d_core.decode.beam import BeamOptions, NoRows, run_beam_request
from as2d_core.decode.best_of import run_samples_request
from as2d_core.decode.request import run_request
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.lookahead import LookaheadSource
from as2d_core.decode.timestamps import marked_up
from as2d_core.decode.words import add_words, prepare_words, speech_end_s
from as2d_core.input.stream import BLOCK_S, CONTEXT_S, StreamSession
from as2d_core.input.sequential import long_form_steps, sequential_windows, speech_only, window_result
from as2d_core.input.transcript import Transcript, WindowResult
from as2d_core.input.waves import UNPRICED, WaveRoute, choose_beam_waves, choose_waves, decoded_in_waves
from as2d_core.input.windows import (CLIPS, SpeechDetector, Window, WindowPlan, clip_windows, outside_clips,
                                     plan_windows)

Decoder = Callable[[Request], DecodeResult]
# a voice-activity detector, or what makes one when a file first needs it (loading one costs; most requests are short)
DetectorOrMaker = SpeechDetector | Callable[[], SpeechDetector | None] | None


@attrs.frozen
class PipelineOptions:
    method: str = attrs.field(default="as2d", validator=lambda _self, _attribute, name: get_method(name))
    language: str | None = None  # None: the target detects it (long form: once, unless decode.multilingual)
    task: str = "asr"
    instruction: str | None = None
    decode: DecodeOptions = attrs.Factory(DecodeOptions)
    lookahead: bool = True  # draft window n+1 while the target verifies window n
    # each window's avg_logprob and no_speech_prob, from a target session that keeps them (``ResponseScores``):
    # for callers that report them (``as2d.WhisperModel``, the server's verbose_json); off by default, since keeping
    # them costs a log-softmax over the vocabulary at every verified position
    scores: bool = False

    @property
    def max_window_s(self) -> float:
        """The longest window, in seconds: the decoding options' ``chunk_length`` (Whisper's 30 s by default)."""
        return float(self.decode.chunk_length)


def _made(detector: DetectorOrMaker) -> SpeechDetector | None:
    """A detector, made now if it was given as what makes one (once, when a file first needs it)."""
    if callable(detector) and not isinstance(detector, SpeechDetector):
        return detector()
    return detector


def _first_commit_then(action: Callable[[], None], then: OnCommit | None) -> OnCommit:
    """An ``OnCommit`` that runs ``action`` at the first commit (the target is prepared), then ``then`` each time."""
    pending = [action]

    def commit(session, tokens: list[int]) -> None:
        if pending:
            pending.pop()()
        if then is not None:
            then(session, tokens)

    return commit


class Pipeline:
    """Resident target (and drafter) transcribing files window by window, or streams block by block.

    Its parts are handed in: ``as2d_core.setup.build.build_pipeline`` finds them in the plugin registry (the
    bridge for the pair, the installed voice-activity detector). ``decode`` replaces the engine call per
    request (for a baseline such as serial speculative decoding); by default every request goes to
    ``run_request``. ``bridge`` carries the source's tokens to the target: a method that drafts needs one.
    ``detector`` cuts audio over 30 s at pauses: a detector, None, or a callable that makes one when first needed;
    ``long_form_detector`` (the same kinds) finds the speech that the seek route's ``vad_filter`` keeps.
    """

    def __init__(
        self,
        target: Target,
        source: Source | None = None,
        options: PipelineOptions | None = None,
        detector: DetectorOrMaker = None,
        decode: Decoder | None = None,
        bridge: BridgeFactory | None = None,
        long_form_detector: DetectorOrMaker = None,
    ) -> None:
        options = options or PipelineOptions()
        # "auto" becomes this machine's profile of the pair, or none: the route's reasons name the file read
        found = profile_path(options.decode.profile, target.name, None if source is None else source.name)
        if found != options.decode.profile:
            options = attrs.evolve(options, decode=attrs.evolve(options.decode, profile=found))
        self.options = options
        drafts = get_method(self.options.method).needs_source and decode is None
        if drafts and source is None:
            raise ValueError(f"method {self.options.method!r} needs a source (drafter)")
        if drafts and bridge is None:
            raise ValueError(f"method {self.options.method!r} needs the bridge that carries {source.name}'s tokens "
                             f"to {target.name} (as2d_core.setup.build.build_pipeline finds the registered one)")
        self.target = target
        self.bridge = bridge
        publishes = get_method(self.options.method).publishes  # drafts a window ahead; serial cannot
        ahead = source is not None and self.options.lookahead and publishes and not drafts_one_job_at_a_time(source)
        self._ahead = LookaheadSource(source) if ahead else None  # drafts window n+1 while window n is verified
        self._source = source
        self.source = self._ahead or source
        self._detector = detector
        self._long_form_detector = long_form_detector
        self._decode = decode
        self._rows = True  # until a prepared session says otherwise: the target decodes samples side by side
        self._side_by_side: bool | None = None  # whether the target searches windows' beams side by side (unasked)
        self._lock = threading.Lock()
        self.device_profile()  # a file that is no device profile fails here, before any audio is read

    def evolve(self, **changes) -> "Pipeline":
        """The same parts with ``PipelineOptions`` changed: a new pipeline, since the options decide how the
        source is wrapped (never change ``options`` of a pipeline that is built)."""
        return Pipeline(self.target, self._source, attrs.evolve(self.options, **changes), self._detector,
                        self._decode, self.bridge, self._long_form_detector)

    @property
    def detector(self) -> SpeechDetector | None:
        self._detector = _made(self._detector)
        return self._detector

    @property
    def long_form_detector(self) -> SpeechDetector | None:
        self._long_form_detector = _made(self._long_form_detector)
        return self._long_form_detector

    def _searches_side_by_side(self) -> bool:
        """Whether the target searches windows' beams side by side (``capabilities.BeamWaves``: it makes a wave)."""
        if self._side_by_side is None:
            o = self.options.decode
            self._side_by_side = isinstance(self.target, BeamWaves) and \
                self.target.beam_wave(1, o.beam_size, o.target_threads) is not None
        return self._side_by_side

    def device_profile(self) -> dict | None:
        """The device profile ``decode.profile`` names, or None; ``decode.profile.NotAProfile`` (a ValueError)
        where the file is missing or is not one."""
        path = self.options.decode.profile
        if path is None:
            return None
        profile = cached_profile(path)  # a server builds a pipeline per request: the file is read once
        wave_prices(profile, 1)  # its batch costs, if any, are readable
        return profile

    def route(self, windows: int, streamed: bool = False) -> WaveRoute:
        """How a file of ``windows`` windows is decoded (``input.waves``): on the windows route, in waves of how
        many, drafting or not, and why; ``streamed``: its text is heard as it is committed (``on_text``)."""
        o = self.options.decode
        drafts = self.source is not None and get_method(self.options.method).needs_source
        if o.route == "seek":
            why = "Whisper's long form: each request starts where the one before ended"
            if drafts and o.beam_size > 1 and o.temperature[0] == 0:  # beams run target-only; sampled rounds may draft
                if not any(o.temperature):
                    return WaveRoute("seek", 1, False, f"{why}; target-only: beams decode their hypotheses side by "
                                     "side instead")
                why += "; beams decode target-only, the fallback's sampled rounds draft"
            profile = self.device_profile() if drafts else None
            if profile is not None and speculate_rows_from(profile) == 0:  # one request at a time: a batch of 1
                return WaveRoute("seek", 1, False, f"{why}; target-only: profile {o.profile} prices drafting above "
                                 "decoding alone on this device")
            if profile is not None and drafting_pays_alone(profile):
                why += f"; drafts: profile {o.profile} prices drafting below decoding alone on this device"
            elif drafts and profile is None:
                why += f"; drafts: {UNPRICED}"
            return WaveRoute("seek", 1, drafts, why)
        process = drafts and drafts_one_job_at_a_time(self.source)  # a drafter process
        beams = o.beam_size > 1 and o.temperature[0] == 0  # each window's one decode: beam search, target-only
        if beams and not streamed and not o.condition_on_previous_text and self._decode is None \
                and self._searches_side_by_side():
            return choose_beam_waves(o, windows)
        alone = ("text is streamed as it is committed" if streamed else
                 "each window is conditioned on the text before it" if o.condition_on_previous_text else
                 "beams decode their hypotheses side by side instead" if o.beam_size > 1 else
                 "a decoder of the caller's" if self._decode is not None else
                 "its drafter's process drafts one window at a time" if process else
                 f"{self.target.name} cannot verify windows together" if not isinstance(self.target, WindowBatching)
                 else None)
        return choose_waves(o, self.options.method, self.source is not None and not beams, windows,
                            self.device_profile(), alone)

    def request(self, request_id: str, samples: np.ndarray, previous_text: str | TokenPrompt | None = None
                ) -> Request:
        """A request on ``samples`` with the options' fields, the prompt among them: every window of a file gets
        it, as in faster-whisper's batched pipeline (the long form keeps it for its first request itself);
        ``previous_text``: the text before it, when conditioning on it."""
        o = self.options
        fields = o.decode.request_fields()
        return Request(request_id=request_id, audio=samples, language=o.language, task=o.task,
                       instruction=o.instruction, previous_text=previous_text, scores=o.scores, **fields)

    def decode(self, request: Request, options: DecodeOptions | None = None,
               on_commit: OnCommit | None = None, method: str | None = None, words: bool = True) -> DecodeResult:
        """One request; ``on_commit`` hears its tokens as they are committed (not with a ``decode`` of its own);
        ``method``: another than the options' (target-only, where a file's route does not draft); ``words``: its
        words timed when it asks for them (the long form times them itself, on the segments it keeps)."""
        options = options or self.options.decode
        if self._decode is not None:
            result = self._decode(request)
        else:
            method = method or self.options.method
            source = self.source if get_method(method).needs_source else None
            result = self._in_mode(request, method, options, on_commit, source)
        return add_words(self.target, request, result, options.target_threads) if words else result

    def reference(self, request: Request, words: bool = True) -> DecodeResult:
        """Target-only decoding of the same request in the same mode: what every method must reproduce."""
        result = self._in_mode(request, "target-only", self.options.decode)
        return add_words(self.target, request, result, self.options.decode.target_threads) if words else result

    def decode_samples(self, request: Request, seeds: list[int]) -> list[DecodeResult]:
        """``request`` sampled once per seed (the temperature fallback's ``best_of``), the same way for every
        method: side by side on the target alone, one call a step (``decode.best_of``); one by one on a target
        without rows, or by the caller's decoder if the pipeline has one."""
        if self._decode is None and self._rows:
            try:
                return run_samples_request(request, self.target, seeds, self.options.decode)
            except NoRows:
                self._rows = False  # no use preparing a session to find out again
        return [self.decode(attrs.evolve(request, seed=seed), words=False) for seed in seeds]

    def time_words(self, request: Request, result: DecodeResult, tokens: list[int],
                   last_speech_s: float) -> DecodeResult:
        """``result`` with the words of ``tokens`` (the segments it keeps) timed and its segments fitted to them,
        the speech before them having ended at ``last_speech_s`` (Whisper's long form)."""
        return add_words(self.target, request, result, self.options.decode.target_threads, last_speech_s, tokens)

    def _in_mode(self, request: Request, method: str, options: DecodeOptions, on_commit: OnCommit | None = None,
                 source: Source | None = None, target: Target | None = None) -> DecodeResult:
        """The request in its mode on ``target`` (a wave's; the pipeline's own by default): the target's beam search
        at temperature 0 when the options ask for beams (``decode.beam``: beams run target-only), else ``method``
        (greedy or seeded sampling)."""
        target = target or self.target
        if request.temperature == 0 and options.beam_size > 1:
            beam = BeamOptions(options.beam_size, options.patience, options.length_penalty)
            return run_beam_request(request, target, beam, options, source, self.bridge)
        return run_request(request, target, source, method, options, on_commit, self.bridge)

    def transcribe(
        self, audio: str | Path | np.ndarray | DecodedAudio, request_id: str | None = None, check: bool = False,
        on_text: Callable[[str], None] | None = None, on_progress: Callable[[float], None] | None = None,
    ) -> Transcript:
        """All of ``audio`` (a file, decoded audio, or 16 kHz mono float32 samples), window by window.

        ``on_text`` hears the transcript's text as the target commits it: pieces that are never taken
        back and that spell ``Transcript.text`` (``as2d_core.decode.deltas``). ``on_progress`` hears the file's
        time up to which the audio is decoded, after each window or long-form request (a progress bar).
        """
        decoded = read_audio(audio) if isinstance(audio, (str, Path)) else audio
        info = decoded.info if isinstance(decoded, DecodedAudio) else None
        samples = decoded.samples if isinstance(decoded, DecodedAudio) else mono_samples(audio)
        request_id = request_id or (Path(audio).stem if isinstance(audio, (str, Path)) else "audio")
        if self.options.decode.route == "seek":
            return self._transcribe_long_form(samples, request_id, check, on_text, on_progress, info)
        with self._lock:
            self._prepare_words()
            start = time.perf_counter()
            plan = self.plan(samples)
            decoded = []
            route, group = self._waves(len(plan.windows), on_text is not None)
            for window, item in zip(plan.windows, self._decoded(plan.audio(samples), plan.windows, request_id, on_text,
                                                                route=route, group=group)):
                decoded.append(item)
                if on_progress is not None:
                    on_progress(WindowResult(window, item[1], speech=plan.speech).end_s)  # in the file's time
            requests, results = [r for r, _ in decoded], [r for _, r in decoded]
            wall_s = time.perf_counter() - start
            references: list[DecodeResult | None] = [None] * len(requests)
            if check:  # target-only on each window, its words timed as the method's were
                references = [r for _, r in self._timed_in_order((q, self.reference(q, words=False))
                                                                   for q in requests)]
        notes = ([plan.note] if plan.note else []) + (list(info.warnings) if info else [])
        windows = [WindowResult(w, r, ref, speech=plan.speech) for w, r, ref in zip(plan.windows, results, references)]
        return Transcript(windows, plan.skipped, samples.size / SAMPLE_RATE, wall_s, plan.detector, info, notes,
                          route.as_dict())

    def _transcribe_long_form(self, samples: np.ndarray, request_id: str, check: bool,
                              on_text: Callable[[str], None] | None, on_progress: Callable[[float], None] | None,
                              info: AudioInfo | None) -> Transcript:
        """``transcribe`` by Whisper's long-form rules (``input.sequential``); ``on_text`` hears each request's kept
        text once the request is done (a request's last segment may be decoded again by the next one)."""
        mode = self.options.decode
        detector = self.long_form_detector if mode.filters_speech else None
        if mode.filters_speech and detector is None:
            raise ValueError("vad_filter needs a voice-activity detector for the seek route (build_pipeline gives the "
                             "installed one as long_form_detector): pip install ./plugins/silero_vad")
        with self._lock:
            self._prepare_words()
            start = time.perf_counter()
            route = self.route(1)
            windows, speech, notes = sequential_windows(self, samples, request_id, mode, detector, check, on_text,
                                                        on_progress, self._seek_decode(route))
            wall_s = time.perf_counter() - start
        skipped = speech.skipped(samples.size) if speech is not None else outside_clips(samples, mode.clip_timestamps)
        notes += list(info.warnings) if info else []
        cut_by = CLIPS if mode.clip_timestamps else detector.name if detector else None
        return Transcript(windows, skipped, samples.size / SAMPLE_RATE, wall_s, cut_by, info, notes, route.as_dict())

    def _seek_decode(self, route: WaveRoute) -> Decoder:
        """How the seek route decodes each request: by the options' method, or target-only where ``route`` does
        not draft (the device profile prices drafting above decoding alone); the loop times the words itself."""
        return partial(self.decode, words=False, method=route.method(self.options.method))

    def decode_long_form(self, samples: np.ndarray, request_id: str = "audio", detector: SpeechDetector | None = None,
                         recording: Recording | None = None) -> Iterator[WindowResult]:
        """Whisper's long-form requests on ``samples`` (with ``detector``: its speech joined, ``vad_filter``), each
        decoded only when the caller asks for it, as ``decode_windows`` hands out windows. ``recording``: the
        audio they walk, as a caller that already read its features (the language) made it."""
        audio, speech = speech_only(samples, detector)
        with self._lock:
            self._prepare_words()
            steps = long_form_steps(self, audio, request_id, self.options.decode, self._seek_decode(self.route(1)),
                                    recording)
            try:
                for step in steps if audio.size else ():
                    yield window_result(step, speech)
            finally:
                steps.close()

    def plan(self, samples: np.ndarray) -> WindowPlan:
        if self.options.decode.clip_timestamps:  # the caller's clips, a window each, as faster-whisper's batched
            return clip_windows(samples, self.options.decode.clip_timestamps, self.options.max_window_s)
        # audio that fits in a window is decoded whole unless vad_filter asks for its speech alone
        fits = samples.size <= self.options.max_window_s * SAMPLE_RATE
        detector = None if fits and not self.options.decode.vad_filter else self.detector
        return plan_windows(samples, detector, self.options.max_window_s)

    def decode_windows(self, samples: np.ndarray, plan: WindowPlan, request_id: str = "audio"
                       ) -> Iterator[WindowResult]:
        """The windows of ``plan`` (``self.plan(samples)``), each decoded only when the caller asks for it.

        For callers that hand out results as they come (``as2d.WhisperModel``'s lazy segments); the
        pipeline stays locked until the last window is taken or the iterator is closed.
        """
        with self._lock:
            self._prepare_words()
            route, group = self._waves(len(plan.windows))
            decoded = self._decoded(plan.audio(samples), plan.windows, request_id, None, route, group)
            try:
                for window, (_request, result) in zip(plan.windows, decoded):
                    yield WindowResult(window, result, speech=plan.speech)
            finally:  # a caller that stops early stops the lookahead before the lock is free
                decoded.close()

    def _waves(self, windows: int, streamed: bool = False) -> tuple[WaveRoute, WindowGroup | BeamWave | None]:
        """The file's route (``route``) and, for waves, the target's group of that size (for beams its beam wave);
        a target whose group cannot be made (no windows graph) decodes one window at a time, and the route says so."""
        route = self.route(windows, streamed)
        o = self.options.decode
        if route.beams:  # every size, one at a time too: a row scores alike in any wave
            return route, self.target.beam_wave(route.size, o.beam_size, o.target_threads)
        if route.size < 2:
            return route, None
        group = self.target.window_group(route.size, self.options.decode.target_threads)
        if group is None:
            return choose_waves(self.options.decode, self.options.method, self.source is not None, windows,
                                self.device_profile(), f"{self.target.name} has no windows graph"), None
        return route, group

    def _decoded(self, samples: np.ndarray, windows: tuple[Window, ...], request_id: str,
                 on_text: Callable[[str], None] | None, route: WaveRoute | None = None,
                 group: WindowGroup | BeamWave | None = None) -> Iterator[tuple[Request, DecodeResult]]:
        """Each window's request and result, by ``route`` (in waves with ``group``, else one window at a time; the
        caller holds the lock), its words timed in window order (``_timed_in_order``)."""
        decoded = self._untimed(samples, windows, request_id, on_text, route, group)
        return self._timed_in_order(decoded)

    def _timed_in_order(self, decoded: Iterator[tuple[Request, DecodeResult]]
                        ) -> Iterator[tuple[Request, DecodeResult]]:
        """Each window's result with its words timed, window after window, the speech before each having ended
        where the words of the window before it ended, as faster-whisper's batched pipeline carries it."""
        last_speech_s = 0.0
        try:
            for request, result in decoded:
                result = self.time_words(request, result, result.tokens, last_speech_s)
                end = speech_end_s(result) if request.word_timestamps else None
                last_speech_s = last_speech_s if end is None else request.offset / request.sample_rate + end
                yield request, result
        finally:  # a caller that stops early stops the decoding (its lookahead) too
            decoded.close()

    def _untimed(self, samples: np.ndarray, windows: tuple[Window, ...], request_id: str,
                 on_text: Callable[[str], None] | None, route: WaveRoute | None,
                 group: WindowGroup | BeamWave | None) -> Iterator[tuple[Request, DecodeResult]]:
        """``_decoded`` before the words are timed."""

        def make(w: Window, previous: str | None) -> Request:  # previous: the text before it, when conditioning
            request = self.request(f"{request_id}-w{w.index:03d}", samples[w.start : w.end], previous_text=previous)
            # words in the file's time, aligned over the window's whole seconds, as faster-whisper's batched pipeline
            return attrs.evolve(request, offset=w.start, align_s=float(math.ceil(request.duration_s)))

        deltas = TextDeltas(on_text) if on_text is not None else None
        options = self.options.decode
        conditioned = options.condition_on_previous_text
        route = route or self.route(len(windows), deltas is not None)
        method = route.method(self.options.method)
        if group is not None:
            yield from decoded_in_waves([make(w, None) for w in windows], self.target, group,
                                        partial(self._in_wave, options, method))
            return
        ahead = self._ahead if self._decode is None else None
        if not route.drafts:
            ahead = None
        if conditioned:  # the next window's prompt is this window's text: nothing to draft it from before that
            ahead = None
        if ahead is not None and len(windows) > 1:
            # measured on a 10-minute file (BENCHMARKS.md section 5): at the guessing niceness the
            # drafter gets too few cycles beside the target to draft the next window ahead
            options = attrs.evolve(options, guess_nice=options.drafter_nice)
        requests = [] if conditioned else [make(w, None) for w in windows]
        texts: list[str] = []
        try:
            for i, window in enumerate(windows):
                if conditioned:
                    requests.append(make(window, " ".join(texts) if texts else None))
                on_commit = deltas.commit if deltas is not None else None
                if ahead is not None and i + 1 < len(windows):
                    # queued at this window's first commit: the next window's drafter then stays off the cores
                    # while the target encodes this one (BENCHMARKS.md section 14)
                    on_commit = _first_commit_then(partial(ahead.queue_next, requests[i + 1], options.drafter_threads),
                                                   on_commit)
                result = self.decode(requests[i], options, on_commit, method, words=False)
                if deltas is not None:
                    deltas.end_window(result.text)
                if result.text.strip():  # Whisper feeds back the window's tokens: its timestamps too
                    timed = requests[i].timestamps != "none"
                    texts.append(marked_up(result.segments) if timed else result.text.strip())
                yield requests[i], result
        finally:
            if ahead is not None:
                ahead.cancel()

    def _in_wave(self, options: DecodeOptions, method: str, request: Request, target: Target) -> DecodeResult:
        """One window of a wave on the wave's ``target`` (``decode.together``), with a drafter job of its own, or its
        beam search (a beam wave's)."""
        source = self._ahead.inner if self._ahead is not None else self.source
        source = source if get_method(method).needs_source else None
        return self._in_mode(request, method, options, None, source, target)

    def stream(self, block_s: float = BLOCK_S, context_s: float = CONTEXT_S, check: bool = False):
        """A stream fed block by block (``feed``), each block one request over the current context view."""
        self._prepare_words()
        return StreamSession(self, block_s, context_s, check)

    def _prepare_words(self) -> None:
        """With word timestamps, the target's aligner is made ready before the first window or block, so none
        pays for it."""
        if self.options.decode.word_timestamps:
            prepare_words(self.target, self.options.decode.target_threads)

    def locked(self):
        """The lock that keeps one decode at a time on the resident models (streams hold it per block)."""
        return self._lock
