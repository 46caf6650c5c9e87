"""As²d's kind: a producer thread drafts over the request and publishes batches the target reads (C.2, C.3).

With ``start == "arrival"`` the producer starts when the request arrives, on the language it can know then
(the request's, or the drafter's only one) and at the guessing niceness when it guesses; it is dropped if
the target confirms another. With ``"prepared"``, the drafter prepares after the target.
"""
from __future__ import annotations

from tokenizer_bridges import IdentityBridge

from as2d_core.capabilities import KnownVocabulary
from as2d_core.contracts import BridgeFactory, Request, Source, Target, TargetSession, serves_language
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.kinds.base import Drafting
from as2d_core.decode.loop import Proposer, TargetOnly
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.producer import Producer, stop_and_join
from as2d_core.decode.proposers import PublishedProposer


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


def _pair_bridge(source: Source, target: Target, bridge: BridgeFactory | None) -> BridgeFactory:
    """The bridge resolved when the pair loaded; a source that shares the target's vocabulary needs none given."""
    if bridge is not None:
        return bridge
    if source.vocabulary != target.vocabulary:
        raise ValueError(f"source {source.name} ({source.vocabulary}) needs a bridge to target {target.name} "
                         f"({target.vocabulary}): resolve it once when they load "
                         "(as2d_core.setup.catalog.resolve_bridge) and pass it as bridge=")
    return IdentityBridge.for_request


class PublishedDrafting(Drafting):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        if self.source is not None:
            self.bridge = _pair_bridge(self.source, self.target, self.bridge)
        self.buffer: CandidateBuffer | None = None
        self.producer: Producer | None = None
        self.wasted: Producer | None = None  # started on a language the target did not confirm
        self.early: str | None = None

    def at_arrival(self, speculative: bool) -> None:
        request, source, options = self.request, self.source, self.options
        if not speculative or options.start != "arrival":
            return
        early = _drafting_language(request, source)
        if early is None or not serves_language(source, early):
            return
        self.early = early
        self.buffer = CandidateBuffer(request.request_id, source.name, f"{source.name}:arrival")
        self.producer = Producer(None, None, self.buffer, options.publication_size, self.events,
                                 start_job=lambda: source.prepare(request, early, options.drafter_threads),
                                 niceness=options.drafter_nice if request.language is not None else options.guess_nice)
        self.producer.start()

    def abandon(self) -> None:
        if self.producer is not None:
            stop_and_join([self.producer], self.options.drain_timeout_s)

    def after_prepare(self, session: TargetSession, speculative: bool) -> None:
        # The target encoded and prefilled on all its threads even beside a drafter that started at arrival:
        # measured on 2 cores, the oversubscribed encoder finishes sooner than on one thread of its own
        # (BENCHMARKS.md section 6). It decodes on its shared threads until the drafter is done.
        super().after_prepare(session, speculative)
        options, source = self.options, self.source
        if self.producer is not None and not self.buffer.snapshot().closed:
            session.use_threads(options.shared_target_threads)
        if self.producer is not None and (not speculative or session.language != self.early):
            # started on a language the target did not confirm: stop it (it is drained at the end), go on without it
            self.producer.stop()
            if not speculative:
                session.use_threads(options.target_threads)
            self.wasted, self.buffer, self.producer = self.producer, None, None
        if not speculative:
            return
        if self.producer is None:  # prepared start: the drafter's audio encoded after the target's
            job = source.prepare(self.request, session.language, options.drafter_threads)
            _warm_thread_switch(session, options)
            self.buffer = CandidateBuffer(self.request.request_id, source.name, f"{source.name}:{id(job):x}")
            self.producer = Producer(job, self.bridge(source, self.target, session), self.buffer,
                                     options.publication_size, self.events, niceness=options.drafter_nice)
        self.producer.vocab_size = session.vocab_size if isinstance(session, KnownVocabulary) else None
        if self.producer.bridge is None:
            self.producer.attach_bridge(self.bridge(source, self.target, session))

    def proposer(self, session: TargetSession, timestamps, trace: list[dict]) -> Proposer:
        if self.producer is not None and self.producer.ident is None:
            self.producer.start()
        if self.buffer is None:
            return TargetOnly()
        return PublishedProposer(self.buffer, session, self.options, self.events, timestamps)

    def _drafters(self) -> list[Producer]:
        return [p for p in (self.producer, self.wasted) if p is not None]

    def close(self) -> list:
        return stop_and_join(self._drafters(), self.options.drain_timeout_s)

    @property
    def drained(self) -> bool:
        return bool(self._drafters())

    def result_fields(self) -> dict:
        speculative = self.speculative
        return {**super().result_fields(),
                "budget": self.options.budget if speculative else None,
                "start": self.options.start if speculative else None,
                "producer_error": self.producer.error if self.producer is not None and speculative else None,
                "published": len(self.buffer.snapshot()) if self.buffer is not None else 0,
                "batches": self.buffer.batches if self.buffer is not None else ()}
