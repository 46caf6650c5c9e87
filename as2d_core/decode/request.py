"""One request end to end by any registered method (``methods``); for as2d, the As²d engine:
one producer thread drafting, one target loop verifying.

Neither side waits for the other. The producer runs the drafter over the fixed
request, bridges its tokens into the target vocabulary and publishes immutable
batches. At every boundary the target takes whatever is published, lets the
aligner pick up to ``budget`` candidates after the known root, verifies them in
one call, commits the matching greedy prefix plus its own next token, and cuts
rejected entries out of its cache. With nothing usable it decodes one token
alone. Target-only decoding is the same loop without a producer; the serial methods (``serial``)
draft from the committed prefix before each call instead. Each proposer kind sets up and cleans up its own
drafting (``decode.kinds``); this function only orders the steps and times them.
"""
from __future__ import annotations

import time

from as2d_core.capabilities import serves_task, unsupported_features
from as2d_core.contracts import BridgeFactory, Request, Source, Target, serves_language
from as2d_core.decode.events import EventLog
from as2d_core.decode.kinds import drafting_for
from as2d_core.decode.loop import Counters, OnCommit, target_loop
from as2d_core.decode.methods import Method, get_method
from as2d_core.decode.result import DecodeResult, build_result, timestamp_ids
from as2d_core.decode.scores import response_scores
from as2d_core.decode.options import DecodeOptions


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
    events = EventLog()
    drafting = drafting_for(request, target, source, method, options, bridge, events)
    missing = unsupported_features(target, request)
    if missing:  # a target that does not know a request field would ignore it: refuse instead
        raise ValueError(f"target {target.name} does not offer {' or '.join(missing)}")
    note = None
    arrival = time.perf_counter()
    speculative = method.needs_source
    if speculative and not serves_task(source, request.task):
        note = (f"source {source.name} does not draft the task {request.task!r} (it drafts "
                f"{', '.join(sorted(source.tasks))}); ran target-only with {options.target_threads} threads")
        speculative = False
    drafting.at_arrival(speculative)
    try:
        session = target.prepare(request, options.target_threads)
    except BaseException:
        drafting.abandon()  # the request fails (bad audio, unknown language): so do its drafts
        raise
    if speculative and not serves_language(source, session.language):
        note = (
            f"source {source.name} does not draft {session.language!r} "
            f"(it serves {', '.join(sorted(source.languages))}); ran target-only with {options.target_threads} threads"
        )
        speculative = False
    drafting.after_prepare(session, speculative)
    prepare_s = time.perf_counter() - arrival
    events.add("prepare", arrival)

    counters = Counters()
    trace: list[dict] = []
    try:
        clock_start = time.perf_counter()
        timestamps = timestamp_ids(request, session)
        proposer = drafting.proposer(session, timestamps, trace)
        tokens = target_loop(session, proposer, events, counters, trace, on_commit)
        clock_end = time.perf_counter()
        text = session.decode_text(tokens)
        scores = response_scores(session, tokens) if request.scores else (None, None)
    finally:
        # The request's drafting ends with it, also when the target failed or was interrupted.
        left_behind = drafting.close()
        session.close()
    drain_s = 0.0
    if drafting.drained:
        drain_s = time.perf_counter() - clock_end
        events.add("drain", clock_end)
    if left_behind:
        note = (note + "; " if note else "") + (
            f"the drafter was still in a runtime call {options.drain_timeout_s:g} s after the last token; "
            "it finishes in the background and the process waits for it before exiting")
    return build_result(
        request, method.name, session, tokens, text, (clock_start, clock_end), prepare_s, counters, events, trace,
        drain_s=drain_s,
        avg_logprob=scores[0],
        no_speech_prob=scores[1],
        note=note,
        timestamp_ids=timestamps,
        **drafting.result_fields(),
    )
