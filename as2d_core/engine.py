"""The As²d engine: one producer thread drafting, one target loop verifying.

Neither side waits for the other. The producer runs the drafter over the fixed
request, bridges its tokens into the target vocabulary and publishes immutable
batches. At every boundary the target takes whatever is published, lets the
aligner pick up to ``budget`` candidates after the known root, verifies them in
one call, commits the matching greedy prefix plus its own next token, and cuts
rejected entries out of its cache. With nothing usable it decodes one token
alone. Target-only decoding is the same loop without a producer.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from .align import Aligner
from .buffer import CandidateBuffer
from .catalog import bridge_for
from . import drafter_threads
from .contracts import (Bridge, CancellableJob, DraftJob, DraftPiece, KnownVocabulary, PublishedBatch, Request, Source,
                        Target, TargetSession, TimestampVocabulary, Word, serves_language, serves_task,
                        unsupported_features)
from .events import Decomposition, Event, EventLog, decompose
from .options import MAX_BUDGET, STARTS, DecodeOptions  # noqa: F401  (the engine's options, declared once)
from .priority import lower_thread_priority
from .timestamps import Segment, TextView, response_segments

METHODS = ("target-only", "as2d")
# Hears each verification's newly committed tokens, with the session (their text: ``decode_text``).
OnCommit = Callable[[TargetSession, list[int]], None]


@attrs.define
class DecodeResult:
    request_id: str
    method: str
    language: str
    tokens: list[int]
    text: str
    decode_s: float  # post-prefill clock (Appendix A.3)
    prepare_s: float  # arrival to the decode clock: the target's audio encoding and prefill (and, prepared, the drafter's)
    source: str | None = None
    budget: int | None = None
    start: str | None = None  # when the drafter started: arrival | prepared
    drain_s: float = 0.0  # stopping the producer after the final token (charged separately)
    proposed: int = 0
    accepted: int = 0
    verify_calls: int = 0
    verify_widths: list[int] = attrs.Factory(list)
    target_only_steps: int = 0
    note: str | None = None
    producer_error: str | None = None
    published: int = 0
    decomposition: Decomposition | None = None
    clock: tuple[float, float] = (0.0, 0.0)  # perf_counter() at the request and at the final commit
    events: Any = attrs.field(default=None, repr=False)
    trace: list[dict] = attrs.field(factory=list, repr=False)
    batches: tuple = attrs.field(default=(), repr=False)
    exact: bool | None = None
    # by the response's timestamp tokens in timestamp mode, else the request as one; times from the request's start
    segments: list[Segment] = attrs.Factory(list)
    # with ``Request.word_timestamps``: the response's words (``as2d_core.words``) and what timing them cost
    words: list[Word] = attrs.Factory(list)
    words_s: float | None = None

    @property
    def e2e_s(self) -> float:
        return self.prepare_s + self.decode_s

    @property
    def tps(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The JSON-ready fields of ``as2d run --json``."""
        out = {
            "request_id": self.request_id,
            "text": self.text,
            "tokens": self.tokens,
            "language": self.language,
            "method": self.method,
            "source": self.source,
            "budget": self.budget,
            "start": self.start,
            "decode_s": self.decode_s,
            "tps": self.tps,
            "e2e_s": self.e2e_s,
            "prepare_s": self.prepare_s,
            "drain_s": self.drain_s,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "verify_calls": self.verify_calls,
            "verify_widths": self.verify_widths,
            "target_only_steps": self.target_only_steps,
            "published": self.published,
            "note": self.note,
            "producer_error": self.producer_error,
            "segments": [segment.as_dict() for segment in self.segments],
        }
        if self.decomposition is not None:
            out["decomposition"] = self.decomposition.as_dict()
        if self.words_s is not None:
            out["words"] = [word.as_dict() for word in self.words]
            out["words_s"] = self.words_s
        if self.exact is not None:
            out["exact"] = self.exact
        return out


def _merged(pieces: list[DraftPiece]) -> DraftPiece:
    """Consecutive pieces as one (their tokens, confidences and audio span in order)."""
    confidences = None if any(p.confidences is None for p in pieces) else tuple(c for p in pieces for c in p.confidences)
    spans = [p.span_s for p in pieces if p.span_s is not None]
    return DraftPiece(tokens=tuple(t for p in pieces for t in p.tokens), confidences=confidences,
                      boundary=any(p.boundary for p in pieces), span_s=(spans[0][0], spans[-1][1]) if spans else None)


class Producer(threading.Thread):
    """Runs one drafter over one request and publishes batches; never reads target state.

    Started at the request's arrival, it prepares the drafter itself (``start_job``) while the target
    encodes its audio. The bridge needs the target's prepared session (its tokenizer and end token),
    so until :meth:`attach_bridge` is called the drafter keeps drafting and its pieces are held;
    ``attach_bridge`` bridges and publishes them at once (and closes the record if the drafter has
    already finished), so the target's first step sees everything drafted during its preparation.
    """

    def __init__(
        self,
        job: DraftJob | None,
        bridge: Bridge | None,
        buffer: CandidateBuffer,
        publication_size: int,
        events: EventLog,
        start_job: Callable[[], DraftJob] | None = None,
        niceness: int = 0,
    ) -> None:
        super().__init__(name=f"as2d-producer-{buffer.source_id}", daemon=True)
        if (job is None) == (start_job is None):
            raise ValueError("give the producer a prepared job or a way to prepare one, not both")
        self.job = job
        self.start_job = start_job
        self.niceness = niceness  # added to this thread's (and the drafter's own threads') niceness
        self.vocab_size: int | None = None  # set with the bridge: ids outside [0, vocab_size) would fail the target
        self.bridge = bridge
        self.buffer = buffer
        self.publication_size = publication_size
        self.events = events
        self.stop_requested = threading.Event()
        self.error: str | None = None
        # Publication state, shared with attach_bridge (the target's thread) under one lock.
        self._lock = threading.Lock()
        self._held: list[DraftPiece] = []  # drafted before the bridge was attached
        self._ended: bool | None = None  # set when drafting is over and the bridge has yet to finish it
        self._tokens: list[int] = []
        self._confidences: list[float] | None = []
        self._drafted = 0
        drafter_threads.track(self)  # joined at exit if a request ever returns before it ends

    def stop(self) -> None:
        """Stop drafting: no further piece is taken, and a job that can cancel its work is told at once."""
        self.stop_requested.set()
        job = self.job
        if isinstance(job, CancellableJob):
            try:
                job.cancel()
            except Exception:  # a drafter's fault never reaches the target's thread
                pass

    def attach_bridge(self, bridge: Bridge) -> None:
        """The target is prepared: its bridge converts everything drafted so far and from now on."""
        with self._lock:
            self.bridge = bridge
            held, self._held = self._held, []
            try:
                if held:  # one bridge call for the whole backlog: a flooding drafter must not cost the target per piece
                    self._bridge_and_publish(_merged(held), time.perf_counter())
                if self._ended is not None:
                    self._finish(self._ended)
            except Exception as exc:  # the drafter failed or was stopped meanwhile: drafts end, the target goes on
                self.error = self.error or f"{type(exc).__name__}: {exc}"
                self.buffer.close(f"producer failed: {self.error}")

    def run(self) -> None:
        deferred = False
        lower_thread_priority(self.niceness)
        try:
            if self.job is None:
                start = time.perf_counter()
                self.job = self.start_job()
                self.events.add("draft-prepare", start)
            pieces = iter(self.job.pieces())
            while not self.stop_requested.is_set():
                start = time.perf_counter()
                piece = next(pieces, None)
                if piece is None:
                    break
                with self._lock:
                    if self.bridge is None:
                        self.events.add("draft", start, tokens=len(piece.tokens))
                        self._held.append(piece)
                    else:
                        self._bridge_and_publish(piece, start)
            ended = self.job.ended_with_eos and not self.stop_requested.is_set()
            with self._lock:
                if self.bridge is None:  # attach_bridge finishes the record
                    self._ended, deferred = ended, True
                else:
                    self._finish(ended)
        except Exception as exc:  # a drafter failure must never reach the target
            self.error = f"{type(exc).__name__}: {exc}"
            self.buffer.close(f"producer failed: {self.error}")
        finally:
            if not deferred:
                self.buffer.close("stopped")
            try:
                if self.job is not None:
                    self.job.close()
            except Exception:
                pass

    def _bridge_and_publish(self, piece: DraftPiece, start: float) -> None:
        ready, ready_conf = self.bridge.push(piece.tokens, piece.confidences)
        self.events.add("draft", start, tokens=len(piece.tokens))
        self._tokens.extend(ready)
        known = self._confidences is not None and ready_conf is not None
        self._confidences = self._confidences + ready_conf if known else None
        self._drafted += len(piece.tokens)
        if piece.boundary or self._drafted >= self.publication_size:
            self._publish(self._tokens, self._confidences, piece.span_s)
            self._tokens, self._confidences, self._drafted = [], [], 0

    def _finish(self, ended: bool) -> None:
        """Flush the bridge and publish the final batch, which closes the record."""
        start = time.perf_counter()
        tail, _ = self.bridge.finish(ended)
        self.events.add("draft", start, tokens=0)
        tokens, confidences = self._tokens, self._confidences
        if tail and confidences:  # keep the confidences of what was drafted; the bridge's tail has none
            self._publish(tokens, confidences, None)
            tokens = []
        self._publish(tokens + tail, confidences if not tail else None, None, final=True)
        self._tokens, self._confidences, self._drafted = [], [], 0

    def _publish(self, tokens, confidences, span_s, final: bool = False) -> None:
        if self.vocab_size is not None:
            outside = next((t for t in tokens if not 0 <= t < self.vocab_size), None)
            if outside is not None:
                raise ValueError(f"drafter published id {outside}, outside the target vocabulary (0..{self.vocab_size - 1})")
        start = time.perf_counter()
        batch = self.buffer.publish(tokens, confidences if confidences else None, span_s, final=final)
        if batch is not None:
            self.events.add("publish", start, batch.published_at, tokens=len(batch.tokens))


def stop_and_join(producers: Sequence[Producer], timeout_s: float) -> list[Producer]:
    """Stop every producer and wait for them together, at most ``timeout_s``; those still running.

    A drafter inside a runtime call finishes that call first; one still running after the wait is
    left to ``drafter_threads``, which joins it before the process exits.
    """
    deadline = time.perf_counter() + timeout_s
    for producer in producers:
        producer.stop()
    for producer in producers:
        if producer.ident is not None:
            producer.join(max(0.0, deadline - time.perf_counter()))
    return [p for p in producers if p.is_alive()]


@attrs.define
class Counters:
    """Verification bookkeeping shared by the engine and the serial baselines."""

    proposed: int = 0
    accepted: int = 0
    verify_calls: int = 0
    widths: list[int] = attrs.Factory(list)
    target_only_steps: int = 0


def verify_and_commit(
    session: TargetSession, root: int, candidates: list[int], events: EventLog, counters: Counters
) -> tuple[list[int], int, Event]:
    """One target call: verify ``root`` and ``candidates``, cut rejected entries out of the cache, count it.

    Returns the greedy predictions, how many candidates matched them, and the
    call's event. The engine and the serial baselines share it, so every method
    commits by the same rule.
    """
    cache_before = session.cache_length
    start = time.perf_counter()
    predictions = session.verify(root, candidates)
    accepted = 0
    while accepted < len(candidates) and candidates[accepted] == predictions[accepted]:
        accepted += 1
    if accepted < len(candidates):
        session.truncate(cache_before + 1 + accepted)
    event = events.add("verify" if candidates else "step", start, tokens=accepted + 1, width=len(candidates) + 1)
    if candidates:
        counters.verify_calls += 1
        counters.widths.append(len(candidates) + 1)
        counters.proposed += len(candidates)
        counters.accepted += accepted
    else:
        counters.target_only_steps += 1
    return predictions, accepted, event


def extend_until_eos(response: list[int], committed: list[int], eos_token: int) -> bool:
    """Append accepted candidates to ``response``; True when they hold the end token (the response is complete)."""
    if eos_token in committed:
        response.extend(committed[: committed.index(eos_token)])
        return True
    response.extend(committed)
    return False


class Proposer(Protocol):
    """Chooses the candidates of one verification: the only part of the target loop that differs by method.

    The engine's decoupled proposer reads the published record; the serial baselines draft from the
    committed prefix; replay reads a priced record. Every method then verifies and commits the same way.
    """

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        """Up to ``limit`` candidates to follow ``root`` (the last of ``response``), and trace fields."""

    def settle(self, accepted: int) -> None:
        """The verification accepted ``accepted`` of the proposed candidates."""


class TargetOnly:
    """No candidates: the target decodes one token per call."""

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        return [], {"anchor": None, "published": 0}

    def settle(self, accepted: int) -> None:
        pass


def confidence_cut(candidates: list[int], confidences: Sequence[float | None], first: int,
                   threshold: float) -> list[int]:
    """as2d-no-bc (SpecASR's budget rule): candidates end at the first one whose confidence is below
    ``threshold`` (that one included). ``confidences[first + i]`` belongs to ``candidates[i]``."""
    for i in range(len(candidates)):
        position = first + i
        value = confidences[position] if position < len(confidences) else None
        if value is not None and value < threshold:
            return candidates[: i + 1]
    return candidates


def record_confidences(batches: Sequence[PublishedBatch]) -> list[float | None]:
    """Per-token confidences of a published record in record order (None where a batch has none)."""
    values: list[float | None] = []
    for batch in batches:
        known = batch.confidences if batch.confidences is not None else ()
        values.extend(known[i] if i < len(known) else None for i in range(len(batch.tokens)))
    return values


class PublishedProposer:
    """As²d's proposal step (C.3): the aligner over the published record, with the previous committed
    token for two-token agreement, limited by the budget, then the optional confidence cut.

    ``record`` is anything with ``snapshot()`` (tokens, closed) and ``batches``: the engine's
    :class:`CandidateBuffer`, or replay's priced record. When the record closes the drafter is done,
    so the target takes all its threads (``session.use_threads``).
    """

    def __init__(self, record, session: TargetSession, options: DecodeOptions, events: EventLog | None = None,
                 timestamps: tuple[int, int] | None = None) -> None:
        self.record = record
        self.session = session
        self.options = options
        self.events = events
        # in timestamp mode, (first timestamp id, end token): the aligner reads the record's text (``TextView``)
        self.text_view = TextView(*timestamps) if timestamps is not None else None
        self.aligner = Aligner(window=options.align_window)
        self.widened = False
        self.proposal = None
        self._confidences: list[float | None] = []
        self._batches_seen = 0

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        start = time.perf_counter()
        snapshot = self.record.snapshot()
        if not self.widened and snapshot.closed:
            self.session.use_threads(self.options.target_threads)
            self.widened = True
        limit = min(self.options.budget, limit)
        lead, positions = [], None
        if self.text_view is None:
            previous = response[-2] if len(response) > 1 else None
            proposal = self.aligner.propose(snapshot.tokens, root, limit, previous)
        else:
            proposal, lead, positions = self.text_view.propose(self.aligner, snapshot.tokens, response, root, limit)
        candidates = list(proposal.candidates)
        if self.options.confidence_stop is not None and candidates:
            first = proposal.anchor + 1
            confidences = self._published_confidences(len(snapshot.tokens) if positions else first + len(candidates))
            if positions:  # the aligner's positions are in the record's text
                confidences = [confidences[i] if i < len(confidences) else None for i in positions]
            candidates = confidence_cut(candidates, confidences, first, self.options.confidence_stop)
            proposal = attrs.evolve(proposal, candidates=tuple(candidates))
        self.proposal = proposal
        if self.events is not None:
            self.events.add("align", start)
        return lead + candidates, {"anchor": proposal.anchor, "published": len(snapshot)}

    def _published_confidences(self, needed: int) -> list[float | None]:
        if needed > len(self._confidences):  # read only the batches published since the last look
            batches = self.record.batches
            self._confidences.extend(record_confidences(batches[self._batches_seen :]))
            self._batches_seen = len(batches)
        return self._confidences

    def settle(self, accepted: int) -> None:
        if self.text_view is not None:
            self.text_view.settle(self.aligner, self.proposal, accepted)
        elif self.proposal.candidates:
            self.aligner.verified(self.proposal, accepted)
        else:
            self.aligner.stepped(self.proposal)


def target_loop(
    session: TargetSession,
    proposer: Proposer,
    events: EventLog,
    counters: Counters,
    trace: list[dict] | None = None,
    on_commit: OnCommit | None = None,
) -> list[int]:
    """Greedy decoding of one response, the one loop of every method.

    Candidates, whoever proposes them, only decide how many tokens a call checks: each call
    commits the target's own greedy tokens (``verify_and_commit``), so the output is exact.
    ``on_commit`` hears the tokens each call commits as soon as they are verified (a committed
    token is final, so a listener never has to take one back); without it the loop does no more.
    """
    response: list[int] = []
    told = 0  # committed tokens handed to on_commit
    root = session.first_token()
    while root != session.eos_token and len(response) < session.max_new_tokens:
        response.append(root)
        if on_commit is not None:  # the root and the candidates accepted before it
            on_commit(session, response[told:])
            told = len(response)
        room = session.max_new_tokens - len(response)  # tokens still allowed after the root
        if room <= 0:
            break
        candidates, fields = proposer.propose(response, root, room - 1)
        predictions, accepted, event = verify_and_commit(session, root, candidates, events, counters)
        if trace is not None:
            trace.append({"kind": event.kind, "start": event.start, "end": event.end, "root": root,
                          "candidates": candidates, "accepted": accepted, "next": predictions[accepted], **fields})
        proposer.settle(accepted)
        if extend_until_eos(response, candidates[:accepted], session.eos_token):
            break
        root = predictions[accepted]
    response = response[: session.max_new_tokens]
    if on_commit is not None and len(response) > told:
        on_commit(session, response[told:])
    return response


def greedy_reference(session: TargetSession, max_new_tokens: int | None = None) -> list[int]:
    """Plain greedy decoding, one token per call, straight on the session API.

    The reference the engine's loop is checked against: it shares no code with it.
    """
    limit = session.max_new_tokens if max_new_tokens is None else max_new_tokens
    tokens = [session.first_token()]
    while tokens[-1] != session.eos_token and len(tokens) < limit:
        tokens.append(session.verify(tokens[-1], [])[0])
    return tokens[:-1] if tokens[-1] == session.eos_token else tokens


def _warm_thread_switch(session: TargetSession, options: DecodeOptions) -> None:
    """Make the mid-request switch to more target threads free of one-off setup costs.

    A backend may build per-thread-count state lazily (ONNX Runtime builds a
    session); one throwaway call per thread count, cut back at once, moves that
    work before the request instead of onto the decode clock.
    """
    for threads in (options.target_threads, options.shared_target_threads):
        session.use_threads(threads)
        session.verify(session.first_token(), [])
        session.truncate(0)


def _drafting_language(request: Request, source: Source) -> str | None:
    """The language the drafter can start on before the target has detected one, if any."""
    if request.language is not None:
        return request.language
    if source.languages is not None and len(source.languages) == 1:
        return next(iter(source.languages))
    return None


def run_request(
    request: Request,
    target: Target,
    source: Source | None = None,
    method: str = "as2d",
    options: DecodeOptions | None = None,
    on_commit: OnCommit | None = None,
) -> DecodeResult:
    """Decode one response; ``prepare_s + decode_s`` is the user's clock from the audio's arrival.

    With ``options.start == "arrival"`` the drafter starts when the request arrives and encodes and
    drafts while the target encodes, detects the language and prefills; with ``"prepared"`` (the
    paper's set-up) both models are prepared first and the drafter starts with the decode clock.
    ``on_commit`` hears the committed tokens as the target verifies them (``target_loop``).
    """
    options = options or DecodeOptions()
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "as2d" and source is None:
        raise ValueError("method 'as2d' needs a source (drafter)")
    missing = unsupported_features(target, request)
    if missing:  # a target that does not know a request field would ignore it: refuse instead
        raise ValueError(f"target {target.name} does not offer {' or '.join(missing)}")
    events = EventLog()
    note = None
    arrival = time.perf_counter()
    speculative = method == "as2d"
    if speculative and not serves_task(source, request.task):
        note = (f"source {source.name} does not draft the task {request.task!r} (it drafts "
                f"{', '.join(sorted(source.tasks))}); ran target-only with {options.target_threads} threads")
        speculative = False
    buffer = producer = wasted = None
    early = _drafting_language(request, source) if speculative and options.start == "arrival" else None
    if early is not None and serves_language(source, early):
        buffer = CandidateBuffer(request.request_id, source.name, f"{source.name}:arrival")
        producer = Producer(None, None, buffer, options.publication_size, events,
                            start_job=lambda: source.prepare(request, early, options.drafter_threads),
                            niceness=options.drafter_nice if request.language is not None else options.guess_nice)
        producer.start()
    # The target encodes and prefills on all its threads even beside a drafter that started at arrival:
    # measured on 2 cores, the oversubscribed encoder finishes sooner than on one thread of its own
    # (BENCHMARKS.md section 6). It decodes on its shared threads until the drafter is done.
    try:
        session = target.prepare(request, options.target_threads)
        if producer is not None and not buffer.snapshot().closed:
            session.use_threads(options.shared_target_threads)
    except BaseException:
        if producer is not None:  # the request fails (bad audio, unknown language): so do its drafts
            stop_and_join([producer], options.drain_timeout_s)
        raise
    if speculative and not serves_language(source, session.language):
        note = (
            f"source {source.name} does not draft {session.language!r} "
            f"(it serves {', '.join(sorted(source.languages))}); ran target-only with {options.target_threads} threads"
        )
        speculative = False
    if producer is not None and (not speculative or session.language != early):
        # started on a language the target did not confirm: stop it (it is drained below) and go on without it
        producer.stop()
        if not speculative:
            session.use_threads(options.target_threads)
        wasted, buffer, producer = producer, None, None
    if speculative and producer is None:  # prepared start: the drafter's audio is encoded before the request
        job = source.prepare(request, session.language, options.drafter_threads)
        _warm_thread_switch(session, options)
        buffer = CandidateBuffer(request.request_id, source.name, f"{source.name}:{id(job):x}")
        producer = Producer(job, bridge_for(source, target, session), buffer, options.publication_size, events,
                            niceness=options.drafter_nice)
    if speculative:
        producer.vocab_size = session.vocab_size if isinstance(session, KnownVocabulary) else None
        if producer.bridge is None:
            producer.attach_bridge(bridge_for(source, target, session))
    prepare_s = time.perf_counter() - arrival
    events.add("prepare", arrival)

    counters = Counters()
    trace: list[dict] = []
    drafters = [p for p in (producer, wasted) if p is not None]
    try:
        clock_start = time.perf_counter()
        if producer is not None and producer.ident is None:
            producer.start()
        timestamps = ((session.timestamp_begin, session.eos_token)
                      if request.timestamps != "none" and isinstance(session, TimestampVocabulary) else None)
        proposer = (PublishedProposer(buffer, session, options, events, timestamps) if buffer is not None
                    else TargetOnly())
        tokens = target_loop(session, proposer, events, counters, trace, on_commit)
        clock_end = time.perf_counter()
        text = session.decode_text(tokens)
    finally:
        # The request's drafting ends with it, also when the target failed or was interrupted.
        left_behind = stop_and_join(drafters, options.drain_timeout_s)
        session.close()
    drain_s = 0.0
    if drafters:
        drain_s = time.perf_counter() - clock_end
        events.add("drain", clock_end)
    if left_behind:
        note = (note + "; " if note else "") + (
            f"the drafter was still in a runtime call {options.drain_timeout_s:g} s after the last token; "
            "it finishes in the background and the process waits for it before exiting")
    return build_result(
        request, method, session, tokens, text, (clock_start, clock_end), prepare_s, counters, events, trace,
        source=source.name if speculative else None,
        budget=options.budget if speculative else None,
        start=options.start if speculative else None,
        drain_s=drain_s,
        note=note,
        producer_error=producer.error if producer is not None and speculative else None,
        published=len(buffer.snapshot()) if buffer is not None else 0,
        batches=buffer.batches if buffer is not None else (),
    )


def build_result(
    request: Request,
    method: str,
    session: TargetSession,
    tokens: list[int],
    text: str,
    clock: tuple[float, float],
    prepare_s: float,
    counters: Counters,
    events: EventLog,
    trace: list[dict],
    **fields: Any,
) -> DecodeResult:
    """One run's result, with its time decomposition on the decode clock and its segments."""
    return DecodeResult(
        request_id=request.request_id,
        method=method,
        language=session.language,
        tokens=tokens,
        text=text,
        decode_s=clock[1] - clock[0],
        prepare_s=prepare_s,
        proposed=counters.proposed,
        accepted=counters.accepted,
        verify_calls=counters.verify_calls,
        verify_widths=counters.widths,
        target_only_steps=counters.target_only_steps,
        decomposition=decompose(events.events, *clock),
        clock=clock,
        events=events.events,
        trace=trace,
        segments=response_segments(request, session, tokens, text),
        **fields,
    )
