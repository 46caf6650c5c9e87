"""One request end to end by any registered method (``methods``); for as2d, the As²d engine:
one producer thread drafting, one target loop verifying.

Neither side waits for the other. The producer runs the drafter over the fixed
request, bridges its tokens into the target vocabulary and publishes immutable
batches. At every boundary the target takes whatever is published, lets the
aligner pick up to ``budget`` candidates after the known root, verifies them in
one call, commits the matching greedy prefix plus its own next token, and cuts
rejected entries out of its cache. With nothing usable it decodes one token
alone. Target-only decoding is the same loop without a producer; the serial methods (``serial``)
draft from the committed prefix before each call instead.
"""
from __future__ import annotations


import time

from tokenizer_bridges import IdentityBridge

from as2d_core.capabilities import KnownVocabulary, serves_task, unsupported_features
from as2d_core.contracts import BridgeFactory, Request, Source, Target, TargetSession, serves_language
from as2d_core.decode.buffer import CandidateBuffer
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters, OnCommit, TargetOnly, target_loop
from as2d_core.decode.methods import Method, get_method
from as2d_core.decode.producer import Producer, stop_and_join
from as2d_core.decode.proposers import PublishedProposer
from as2d_core.decode.result import DecodeResult, build_result, timestamp_ids
from as2d_core.decode.scores import response_scores
from as2d_core.decode.serial import PrefixDrafter, SerialProposer, check_prefix_drafting, open_prefix_session
from as2d_core.decode.options import DecodeOptions


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


def run_request(
    request: Request,
    target: Target,
    source: Source | None = None,
    method: str | Method = "as2d",
    options: DecodeOptions | None = None,
    on_commit: OnCommit | None = None,
    bridge: BridgeFactory | None = None,
) -> DecodeResult:
    """Decode one response; ``prepare_s + decode_s`` is the user's clock from the audio's arrival.

    With ``options.start == "arrival"`` the drafter starts when the request arrives and encodes and
    drafts while the target encodes, detects the language and prefills; with ``"prepared"`` (the
    paper's set-up) both models are prepared first and the drafter starts with the decode clock.
    ``on_commit`` hears the committed tokens as the target verifies them (``target_loop``).
    ``method`` is a registered method's name (or the :class:`Method`); its overrides apply over ``options``.
    A serial method opens its prefix-conditioned drafter after the target is prepared, on the target's threads.
    ``bridge`` carries the source's tokens to the target (``resolve_bridge``, once per loaded pair).
    """
    method = get_method(method)
    options = method.options(options or DecodeOptions())
    if method.needs_source and source is None:
        raise ValueError(f"method {method.name!r} needs a source (drafter)")
    decoupled, serial = method.proposer == "published", method.proposer == "serial"
    if serial:
        check_prefix_drafting(source)
    if decoupled and source is not None:
        bridge = _pair_bridge(source, target, bridge)
    missing = unsupported_features(target, request)
    if missing:  # a target that does not know a request field would ignore it: refuse instead
        raise ValueError(f"target {target.name} does not offer {' or '.join(missing)}")
    events = EventLog()
    note = None
    arrival = time.perf_counter()
    speculative = method.needs_source
    if speculative and not serves_task(source, request.task):
        note = (f"source {source.name} does not draft the task {request.task!r} (it drafts "
                f"{', '.join(sorted(source.tasks))}); ran target-only with {options.target_threads} threads")
        speculative = False
    buffer = producer = wasted = None
    early = _drafting_language(request, source) if decoupled and speculative and options.start == "arrival" else None
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
    if decoupled and speculative and producer is None:  # prepared start: the drafter's audio encoded before the request
        job = source.prepare(request, session.language, options.drafter_threads)
        _warm_thread_switch(session, options)
        buffer = CandidateBuffer(request.request_id, source.name, f"{source.name}:{id(job):x}")
        producer = Producer(job, bridge(source, target, session), buffer, options.publication_size, events,
                            niceness=options.drafter_nice)
    if decoupled and speculative:
        producer.vocab_size = session.vocab_size if isinstance(session, KnownVocabulary) else None
        if producer.bridge is None:
            producer.attach_bridge(bridge(source, target, session))
    drafter = policy = None
    if serial and speculative:
        policy = method.serial.for_budget(options.budget)
        try:
            drafter_session = open_prefix_session(source, request, session.language, options.target_threads)
        except BaseException:
            session.close()
            raise
        drafter = PrefixDrafter(drafter_session, session, source.vocabulary == target.vocabulary)
    prepare_s = time.perf_counter() - arrival
    events.add("prepare", arrival)

    counters = Counters()
    trace: list[dict] = []
    drafters = [p for p in (producer, wasted) if p is not None]
    try:
        clock_start = time.perf_counter()
        if producer is not None and producer.ident is None:
            producer.start()
        timestamps = timestamp_ids(request, session)
        if buffer is not None:
            proposer = PublishedProposer(buffer, session, options, events, timestamps)
        elif drafter is not None:
            proposer = SerialProposer(drafter, policy, events, trace)
        else:
            proposer = TargetOnly()
        tokens = target_loop(session, proposer, events, counters, trace, on_commit)
        clock_end = time.perf_counter()
        text = session.decode_text(tokens)
        scores = response_scores(session, tokens) if request.scores else (None, None)
    finally:
        # The request's drafting ends with it, also when the target failed or was interrupted.
        left_behind = stop_and_join(drafters, options.drain_timeout_s)
        session.close()
        if drafter is not None:
            drafter.s.close()
    drain_s = 0.0
    if drafters:
        drain_s = time.perf_counter() - clock_end
        events.add("drain", clock_end)
    if left_behind:
        note = (note + "; " if note else "") + (
            f"the drafter was still in a runtime call {options.drain_timeout_s:g} s after the last token; "
            "it finishes in the background and the process waits for it before exiting")
    return build_result(
        request, method.name, session, tokens, text, (clock_start, clock_end), prepare_s, counters, events, trace,
        source=source.name if speculative else None,
        budget=policy.proposals if drafter is not None else options.budget if speculative else None,
        start=options.start if decoupled and speculative else None,
        drain_s=drain_s,
        avg_logprob=scores[0],
        no_speech_prob=scores[1],
        note=note,
        producer_error=producer.error if producer is not None and speculative else None,
        published=len(buffer.snapshot()) if buffer is not None else proposer.published if drafter is not None else 0,
        batches=buffer.batches if buffer is not None else (),
        timestamp_ids=timestamps,
    )
