"""Pricing saved trajectories under a device profile (Section 4.3, Appendix D.3, D.4.3), on both clocks.

A trace (docs/traces.md) fixes everything that does not depend on cost: the target's greedy
response and the drafter's work (its pieces and what each made publishable). For the decoupled
methods that is enough to re-run the request at any budget, drafter niceness and start: the
drafter's work is priced on the profile (its encoder by audio length, each piece, the end of the
job) and laid on a timeline beside the target's preparation and then its verification, slowed by
each other as the profile measured at that niceness (:func:`timeline`); the target loop is then the
engine's own loop (``engine.target_loop``, ``engine.PublishedProposer``) run on a simulated clock over
priced stand-ins for the target (:class:`PricedTarget`: greedy tokens from the reference) and the
record (:class:`PricedRecord`: only what is published by that instant), each round charged the
profile's loop cost plus the cost of its physical width, beside the drafter while it runs and alone
once its record is closed, as the engine switches threads.

Two clocks come out of one replay: the paper's decode clock (``decode_s``, from the end of the
target's preparation) and the user's (``e2e_s`` = ``prepare_s`` + ``decode_s``, from the audio's
arrival). A profile without preparation costs (the paper's phones) prices the decode clock only,
with the drafter started with it (the paper's set-up). With ``publication="native"`` the drafter's
traced publication times and the traced preparation stand, and only the target loop is priced.

Serial methods (sd-k*, asp, as2d-no-td) depend on the target prefix, so they are priced as traced:
their drafting rounds plus their calls. Each method's registration says which of these it gets
(``Method.pricing``; :func:`priced_as`).
"""
from __future__ import annotations

import bisect
import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from as2d_core.decode.loop import Counters, TargetOnly, target_loop
from as2d_core.decode.proposers import PublishedProposer
from as2d_core.decode.methods import get_method

from as2d_core.decode.options import DEFAULTS, DecodeOptions
from as2d_core.decode.events import EventLog
from as2d_core.decode.options import STARTS
from .costs import Contention, Costs, DrafterCosts

PUBLICATION = ("profile", "native")
CLOCKS = ("e2e", "decode")  # the user's clock (arrival to final token) and the paper's (after preparation)
NO_EOS_LIMIT = 1 << 30  # a response that ended at its end token: the cap never binds in replay
RUN_FILE = "run.json"  # beside traces.jsonl: the bench's options (niceness, start) and whether languages were named


@attrs.frozen
class Batch:
    tokens: tuple[int, ...]
    t: float  # publication time (s on the decode clock)
    steps: int = 0  # drafter pieces behind it (informative)
    final: bool = False
    confidences: tuple[float, ...] | None = None


@attrs.frozen
class Unit:
    """A piece of the drafter's traced work, priced by the profile.

    ``index`` is the piece's place in its job (0: the first), -1 for the call that found the job
    over; ``tokens`` its drafter tokens; ``published`` the target tokens that became publishable
    with it (the bridge's output; 0 when it held them back for a later piece).
    """

    index: int
    tokens: int
    published: int


@attrs.frozen
class Record:
    """What a replay needs from one trace: the reference response, the published record, the drafter's work."""

    window: str
    method: str
    source: str | None
    budget: int | None
    language: str | None
    reference: tuple[int, ...]  # greedy response, followed by the end token when it ended there
    tokens: int  # committed response length
    max_new_tokens: int
    batches: tuple[Batch, ...]
    decode_s: float  # native decode clock
    calls: tuple[dict, ...] = ()
    serial_drafted: int = 0  # drafter tokens of serial rounds
    prepare_s: float | None = None  # native arrival to decode clock
    start: str | None = None  # when the drafter started: arrival | prepared (None: no drafter, or an older trace)
    audio_s: float | None = None  # the request's audio length (None: an older trace)
    named: bool = True  # the request named its language (else the target detected it)
    niceness: int | None = None  # the drafter's niceness in the traced run (None: not recorded)
    units: tuple[Unit, ...] = ()
    label: str | None = None  # the bench's name of the run (``as2d@SOURCE`` for a later source)
    timestamps: tuple[int, int] | None = None  # timestamp mode's (first timestamp id, end token), as traced

    @property
    def name(self) -> str:
        return self.label or self.method

    def name_at(self, budget: int) -> str:
        """The run's name re-priced at ``budget``: ``as2d-b5``, ``as2d-b5@SOURCE``."""
        method, sep, source = self.name.partition("@")
        return f"{method}-b{budget}{sep}{source}"

    @property
    def closed(self) -> bool:
        """The drafter finished its record natively (its last batch is final)."""
        return bool(self.batches) and self.batches[-1].final

    @property
    def native_e2e_s(self) -> float | None:
        return None if self.prepare_s is None else self.prepare_s + self.decode_s


@attrs.define
class Replayed:
    """One priced run, in the row shape of ``as2d bench`` (plus what the replay checked)."""

    window: str
    method: str
    source: str | None
    budget: int | None
    tokens: list[int]
    decode_s: float
    drain_s: float = 0.0
    proposed: int = 0
    accepted: int = 0
    widths: list[int] = attrs.Factory(list)
    target_only_steps: int = 0
    rounds: list[dict] = attrs.Factory(list)
    publication: str | None = None  # how drafter times were priced (profile | native)
    prepare_s: float | None = None  # arrival to decode clock; None: the profile has no preparation costs
    niceness: int | None = None
    start: str | None = None

    @property
    def tps(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def e2e_s(self) -> float | None:
        return None if self.prepare_s is None else self.prepare_s + self.decode_s

    def seconds(self, clock: str) -> float | None:
        """Seconds on ``clock`` (``e2e`` or ``decode``)."""
        return self.e2e_s if clock == "e2e" else self.decode_s


def _bridged_backlog(spans: list[dict], start: str | None) -> dict | None:
    """The draft span of the bridge call that converted the pieces held while the target prepared.

    Drafting from arrival, pieces are held until the target is prepared; then one bridge call
    converts them all and one batch publishes them. That call is recorded as a draft span with
    their tokens, right before the first publication; it is not a piece of the drafter's own.
    """
    if start != "arrival":
        return None
    first = next((i for i, s in enumerate(spans) if s["kind"] == "publish"), len(spans))
    before = [s for s in spans[:first] if s["kind"] == "draft" and s.get("tokens")]
    if len(before) >= 2 and before[-1]["tokens"] == sum(s["tokens"] for s in before[:-1]) and before[-1]["t1"] <= 1e-6:
        return before[-1]
    return None


def _units(trace: dict, batches: Sequence[Batch]) -> tuple[Unit, ...]:
    """The drafter's pieces in the order they were done, each with the target tokens published after it.

    A batch published after pieces that were bridged as they came belongs to its last piece (it
    could not be seen before it). The batch that publishes the pieces held while the target
    prepared is shared among them by their drafter tokens, so a replay in which fewer of them
    are ready by then publishes only theirs. Without spans (older traces): one piece per token.
    """
    spans = sorted((s for s in trace.get("spans", ()) if s["kind"] in ("draft", "publish")),
                   key=lambda s: (s["t1"], s["kind"] == "publish"))
    drafts = [s for s in spans if s["kind"] == "draft"]
    if len([s for s in spans if s["kind"] == "publish"]) != len(batches) or not drafts:
        return tuple(Unit(i, 1, 1) for i in range(sum(len(b.tokens) for b in batches)))
    merged = _bridged_backlog(spans, trace.get("start"))
    end = drafts[-1] if not drafts[-1].get("tokens") else None
    units: list[Unit] = []
    pending: list[Unit] = []
    backlog = False
    sizes = iter(len(b.tokens) for b in batches)  # the publish spans are the batches, in order
    for span in spans:
        if span is merged:
            backlog = True
        elif span["kind"] == "draft":
            index = -1 if span is end else sum(1 for u in units + pending if u.index >= 0)
            pending.append(Unit(index, span.get("tokens") or 0, 0))
        else:
            count = next(sizes)
            if backlog and pending:  # shared by drafter tokens, cumulatively rounded down
                total = sum(u.tokens for u in pending) or 1
                bounds = [count * c // total for c in itertools.accumulate(u.tokens for u in pending)]
                bounds[-1] = count
                pending = [attrs.evolve(u, published=b - a) for u, a, b in zip(pending, [0, *bounds], bounds)]
            elif pending:
                pending[-1] = attrs.evolve(pending[-1], published=count)
            elif units:
                units[-1] = attrs.evolve(units[-1], published=units[-1].published + count)
            backlog = False
            units += pending
            pending = []
    return tuple(units + pending)


def record_of(trace: dict) -> Record:
    """Read one ``as2d-trace/1`` object into what :func:`simulate` takes."""
    tokens = list(trace["tokens"])
    reference = list(tokens)
    if trace.get("calls"):
        # the committed stream (first token, then each call's accepted candidates and own token) runs past the
        # response by the end token; an end token accepted as a candidate is followed by the call's own token
        produced = ([tokens[0]] if tokens else []) + [t for c in trace["calls"] for t in c["commit"]]
        if len(produced) > len(tokens) and trace["calls"][-1]["commit"]:
            reference.append(produced[len(tokens)])
    ended = len(reference) > len(tokens)
    max_new = NO_EOS_LIMIT if ended else len(tokens)
    batches = []
    units: tuple[Unit, ...] = ()
    if priced_as(trace["method"]) == "published":
        for b in trace.get("published", []):
            batches.append(Batch(tuple(b["tokens"]), float(b["t"]), 0, bool(b.get("final")),
                                 tuple(b["confidences"]) if b.get("confidences") else None))
        units = _units(trace, batches)
    drafted = sum(b.get("drafted", 0) for b in trace.get("published", ()) if "drafted" in b)
    run = trace.get("_run") or {}
    options = run.get("options") or {}
    named = not run.get("detect_language", False)
    niceness = options.get("drafter_nice" if named else "guess_nice")
    return Record(window=trace["window"], method=trace["method"], source=trace.get("source"),
                  budget=trace.get("budget"), language=trace.get("language"), reference=tuple(reference),
                  tokens=len(tokens), max_new_tokens=max_new, batches=tuple(batches),
                  decode_s=float(trace["decode_s"]), calls=tuple(trace.get("calls", ())),
                  serial_drafted=drafted, prepare_s=trace.get("prepare_s"),
                  start=trace.get("start") or ("prepared" if trace.get("source") else None),
                  audio_s=trace.get("audio_s"), named=named, niceness=niceness, units=units, label=trace.get("label"),
                  timestamps=tuple(trace["timestamps"]) if trace.get("timestamps") else None)


def timeline(target_s: float | None, work: Sequence[float], contention: Contention, start: str,
             prepared_extra: float = 0.0) -> tuple[float, list[float]]:
    """When the target is prepared and when each drafter work item ends, in seconds from arrival.

    ``target_s``: the target's preparation alone; ``work``: the drafter's items alone, in order (its
    encoder first). From arrival both start together: while both run the target's preparation takes
    ``contention.target_prepare`` times as long and the drafter's work ``drafter_prepare`` times; a
    drafter done first leaves the target alone. Once the target is prepared it verifies and the
    drafter's work takes ``drafter_verify`` times as long. Prepared (the paper's set-up): the target
    prepares alone, then the drafter's encoder runs alone (and ``prepared_extra``, the engine's warm
    calls), and the drafter's pieces start with the decode clock. Without preparation costs
    (``target_s`` None) the decode clock starts at 0 and the drafter with it.
    """
    if target_s is None or start != "arrival":
        prepared = 0.0 if target_s is None else target_s + work[0] + prepared_extra
        ends = [prepared]
        for w in work[1:]:
            ends.append(ends[-1] + w * contention.drafter_verify)
        return prepared, ends
    ends: list[float] = []
    t, left_target, prepared = 0.0, target_s, None
    for w in work:
        left = w
        while prepared is None and left > 0:  # both run
            if left * contention.drafter_prepare <= left_target * contention.target_prepare:
                t += left * contention.drafter_prepare
                left_target -= left * contention.drafter_prepare / contention.target_prepare
                left = 0.0
            else:
                t += left_target * contention.target_prepare
                left -= left_target * contention.target_prepare / contention.drafter_prepare
                left_target, prepared = 0.0, t
        t += left * contention.drafter_verify
        ends.append(t)
    if prepared is None:
        prepared = t + left_target
    return prepared, ends


def drafter_schedule(record: Record, drafter: DrafterCosts, contention: Contention, target_s: float | None,
                     start: str, warm_s: float = 0.0) -> tuple[float, list[Batch]]:
    """The preparation's length and the replayed batches (times on the decode clock) of one decoupled run."""
    work = [drafter.prepare_at(record.audio_s) or 0.0]
    for u in record.units:
        cost = drafter.end if u.index < 0 else drafter.piece(u.index, u.tokens)
        work.append(cost + (drafter.publish if u.published else 0.0))
    prepared, ends = timeline(target_s, work, contention, start, warm_s)
    tokens = [t for b in record.batches for t in b.tokens]
    batches, offset = [], 0
    last = len(record.units) - 1
    for i, (u, end) in enumerate(zip(record.units, ends[1:])):
        final = i == last and record.closed
        if u.published or final:
            batches.append(Batch(tuple(tokens[offset: offset + u.published]), max(0.0, end - prepared), 1, final))
            offset += u.published
    if offset < len(tokens) and batches:  # spans that did not account for every token: the rest with the last
        batches[-1] = attrs.evolve(batches[-1], tokens=batches[-1].tokens + tuple(tokens[offset:]))
    return prepared, batches


class _Clock:
    """The simulated clock of one replay (seconds from the start of the decode clock)."""

    def __init__(self) -> None:
        self.t = 0.0


class PricedTarget:
    """A stand-in for the target's session in a replay: the engine's loop runs on it unchanged.

    Its greedy tokens come from the traced reference (greedy output does not depend on cost) and
    each call is charged ``price(width, alone)`` on the simulated clock; ``use_threads`` is the
    engine's switch to all target threads once the drafter's record has closed.
    """

    def __init__(self, reference: Sequence[int], eos: int | None, max_new_tokens: int,
                 price: Callable[[int, bool], float], clock: _Clock, alone: bool) -> None:
        self.reference = reference
        self.eos_token = eos if eos is not None else -1  # -1: a response cut by its length, never by a token
        self.max_new_tokens = max_new_tokens
        self.price = price
        self.clock = clock
        self.alone = alone
        self.cache_length = 0
        self.calls: list[tuple[float, float, bool]] = []  # (t0, t1, alone) of every call

    def first_token(self) -> int:
        return self.reference[0]

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        width = len(candidates) + 1
        t0 = self.clock.t
        self.clock.t += self.price(width, self.alone)
        self.calls.append((t0, self.clock.t, self.alone))
        after = self.cache_length + 1  # reference index of the token after the root
        self.cache_length += width
        return [self.reference[i] if i < len(self.reference) else -1 for i in range(after, after + width)]

    def truncate(self, cache_length: int) -> None:
        self.cache_length = cache_length

    def use_threads(self, threads: int) -> None:
        self.alone = True


@attrs.frozen
class _Snapshot:
    tokens: tuple[int, ...]
    closed: bool

    def __len__(self) -> int:
        return len(self.tokens)


class PricedRecord:
    """The drafter's published record as the target sees it at the simulated instant.

    ``visible()`` says how many batches are published now: by their (priced or native)
    publication times, or by what a native run's rounds saw.
    """

    def __init__(self, batches: Sequence[Batch], visible: Callable[[], int]) -> None:
        self.all_batches = tuple(batches)
        self.visible = visible
        self._ends = []
        n = 0
        for b in self.all_batches:
            n += len(b.tokens)
            self._ends.append(n)
        self._tokens = tuple(t for b in self.all_batches for t in b.tokens)

    def snapshot(self) -> _Snapshot:
        seen = self.visible()
        closed = seen == len(self.all_batches) and bool(self.all_batches) and self.all_batches[-1].final
        return _Snapshot(self._tokens[: self._ends[seen - 1]] if seen else (), closed)

    @property
    def batches(self) -> tuple[Batch, ...]:
        return self.all_batches[: self.visible()]


def _eos_of(record: Record, eos_token: int | None) -> int | None:
    if eos_token is not None:
        return eos_token
    return record.reference[-1] if record.max_new_tokens == NO_EOS_LIMIT else None


def _run_loop(record: Record, target: PricedTarget, published: PricedRecord | None, budget: int | None,
              align_window: int, confidence_stop: float | None, out: Replayed) -> list[dict]:
    """The engine's own target loop over the priced stand-ins; fills ``out``'s counters."""
    options = DecodeOptions(budget=budget or 1, align_window=align_window, confidence_stop=confidence_stop)
    proposer = (PublishedProposer(published, target, options, timestamps=record.timestamps) if published is not None
                else TargetOnly())
    counters, trace = Counters(), []
    out.tokens = target_loop(target, proposer, EventLog(), counters, trace)
    out.proposed, out.accepted = counters.proposed, counters.accepted
    out.widths, out.target_only_steps = counters.widths, counters.target_only_steps
    out.rounds = [{"t0": t0, "t1": t1, "width": len(r["candidates"]) + 1, "accepted": r["accepted"],
                   "visible": r["published"], "alone": alone} for r, (t0, t1, alone) in zip(trace, target.calls)]
    out.decode_s = target.clock.t
    return trace


def simulate(record: Record, costs: Costs, budget: int | None, align_window: int = DEFAULTS.align_window,
             publication: str = "profile", confidence_stop: float | None = None,
             eos_token: int | None = None, niceness: int | None = None, start: str | None = None) -> Replayed:
    """Re-run the request on a simulated clock; ``budget=None`` means target-only.

    ``niceness`` and ``start`` re-price the drafter at another niceness or start (default: as traced).
    """
    if start is not None and start not in STARTS:
        raise ValueError(f"start must be one of {STARTS}, got {start!r}")
    speculative = budget is not None and record.source is not None and bool(record.batches)
    drafter = costs.drafter(record.source) if speculative else None
    if speculative and drafter is None:  # the profile does not price this drafter: its native times stand
        publication = "native"
    niceness = record.niceness if niceness is None else niceness
    start = start or record.start or "prepared"
    contention = drafter.at(niceness) if drafter is not None else None
    target_s = costs.prepare(record.audio_s, record.named)
    batches, prepare_s = record.batches, target_s
    if publication == "native":  # the traced preparation stands too
        prepare_s = record.prepare_s
    elif speculative:
        warm = 0.0
        if start == "prepared" and target_s is not None:  # the engine's warm calls on both thread counts
            warm = costs.verify(1, alone=True) + costs.verify(1, alone=False, contention=contention)
        prepared, batches = drafter_schedule(record, drafter, contention, target_s, start, warm)
        prepare_s = prepared if target_s is not None else None
    times = [b.t for b in batches]
    clock = _Clock()
    target = PricedTarget(record.reference, _eos_of(record, eos_token), record.max_new_tokens,
                          lambda width, alone: costs.loop_for(alone) + costs.verify(width, alone, contention),
                          clock, alone=not speculative)
    published = None
    if speculative:  # causal: a round sees only what is published by its start
        published = PricedRecord(batches, lambda: bisect.bisect_right(times, clock.t))
    out = Replayed(record.window, record.method, record.source if speculative else None,
                   budget if speculative else None, [], 0.0, prepare_s=prepare_s,
                   niceness=niceness if speculative else None, start=start if speculative else None)
    _run_loop(record, target, published, budget, align_window, confidence_stop, out)
    out.publication = publication if speculative else None
    if speculative and times and times[-1] > clock.t:  # drain: the drafter's work in flight at the last token
        out.drain_s = next(x for x in times if x > clock.t) - clock.t
    return out


def replay_native(record: Record, align_window: int = DEFAULTS.align_window,
                  confidence_stop: float | None = None) -> Replayed:
    """Replay a native as2d trace at its own measured costs: each round sees what the native round saw
    and each call costs what it cost natively (up to the next round's call).

    Nothing here is priced, so the result must reproduce the native run call by call: a check that
    replay runs the engine's policy, not a copy of it.
    """
    calls = record.calls
    starts = [c["t0"] for c in calls] + [record.decode_s]
    clock = _Clock()
    target = PricedTarget(record.reference, _eos_of(record, None), record.max_new_tokens,
                          lambda width, alone: starts[len(target.calls) + 1] - starts[len(target.calls)],
                          clock, alone=False)
    ends = list(itertools.accumulate(len(b.tokens) for b in record.batches))

    def visible() -> int:
        seen = calls[min(len(target.calls), len(calls) - 1)].get("visible") or 0
        return bisect.bisect_right(ends, seen)

    clock.t = starts[0]
    out = Replayed(record.window, record.method, record.source, record.budget, [], 0.0, publication="native",
                   prepare_s=record.prepare_s)
    _run_loop(record, target, PricedRecord(record.batches, visible), record.budget, align_window, confidence_stop, out)
    return out


def price_serial(record: Record, costs: Costs) -> Replayed:
    """A serial method as traced: its drafting (alone, the target waits) plus its calls (alone).

    Its preparation is the target's and then the drafter's encoder, one after the other.
    """
    out = Replayed(record.window, record.method, record.source, record.budget, list(record.reference[: record.tokens]),
                   0.0)
    t = record.serial_drafted * costs.draft_step(shared=False) if record.serial_drafted else 0.0
    for call in record.calls:
        t += costs.loop + costs.verify(call["width"], alone=True)
        if call["kind"] == "verify":
            out.proposed += len(call["candidates"])
            out.accepted += call["accepted"]
            out.widths.append(call["width"])
        else:
            out.target_only_steps += 1
    out.decode_s = t
    target_s = costs.prepare(record.audio_s, record.named)
    drafter = costs.drafter(record.source) if record.source is not None else None
    encoder = drafter.prepare_at(record.audio_s) if drafter is not None else 0.0
    out.prepare_s = None if target_s is None or encoder is None else target_s + encoder
    return out


def replay_record(record: Record, costs: Costs, budget: int | None = None, align_window: int = DEFAULTS.align_window,
                  publication: str = "profile", niceness: int | None = None, start: str | None = None) -> Replayed:
    """Price one trace; ``budget``, ``niceness`` and ``start`` override the traced ones of a decoupled method."""
    method = get_method(record.method)
    if method.pricing == "serial":
        return price_serial(record, costs)
    if method.pricing == "target-only" or record.source is None:
        return simulate(record, costs, None, align_window, publication)
    return simulate(record, costs, budget or record.budget, align_window, publication,
                    method.override("confidence_stop"), niceness=niceness, start=start)


def priced_as(method: str) -> str:
    """How a trace of this registered method is priced: ``"published"``, ``"serial"`` or ``"target-only"``."""
    return get_method(method).pricing


def read_traces(paths: Iterable[str | Path], rounds: bool = False) -> list[dict]:
    """Trace objects from files (``traces.jsonl``) or directories holding one, each with its bench's
    ``run.json`` (options, named languages) when it lies beside the file. Of a bench's repeated rounds,
    only each run's median round unless ``rounds``."""
    traces = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            path = path / "traces.jsonl"
        run_file = path.parent / RUN_FILE
        run = json.loads(run_file.read_text()) if run_file.is_file() else None
        for line in path.read_text().splitlines():
            if line.strip():
                trace = json.loads(line)
                if not rounds and trace.get("median_round") is False:
                    continue
                trace["_file"] = str(path)  # runs of one bench pass, for pairing with their own target-only run
                if run is not None:
                    trace["_run"] = run
                traces.append(trace)
    return traces


def row_of(replayed: Replayed, record: Record, method: str | None = None) -> dict:
    """A ``results.jsonl``-shaped row (``as2d bench``), so the bench summary applies unchanged."""
    native_e2e = record.native_e2e_s
    return {
        "window": record.window, "lang": record.language, "method": method or record.name,
        "tokens": len(replayed.tokens), "decode_s": replayed.decode_s, "tps": replayed.tps,
        "prepare_s": replayed.prepare_s, "e2e_s": replayed.e2e_s,
        "exact": list(replayed.tokens) == list(record.reference[: record.tokens]),
        "proposed": replayed.proposed, "accepted": replayed.accepted, "verify_calls": len(replayed.widths),
        "verify_widths": replayed.widths, "target_only_steps": replayed.target_only_steps,
        "drain_s": replayed.drain_s, "source": replayed.source, "budget": replayed.budget,
        "niceness": replayed.niceness, "start": replayed.start, "publication": replayed.publication,
        "native_tps": record.tokens / record.decode_s if record.decode_s > 0 else None,
        "native_e2e_tps": record.tokens / native_e2e if native_e2e else None,
    }


def calibration_key(trace: dict) -> tuple[str, str, int | None]:
    """The target-only run a trace is calibrated on: the same bench pass, window and round."""
    return trace.get("_file", ""), trace["window"], trace.get("round")


def load_factors(traces: Sequence[dict], costs: Costs) -> dict[tuple[str, str, int | None], tuple[float, float | None]]:
    """Per (file, window, round): native target-only decode time over its replay under ``costs``, and the same
    of its preparation (None when the profile has no preparation costs or the trace no preparation).

    On a machine whose load drifts (shared cores), this calibrates every cost of a window with
    the target-only run made just before it (bench runs methods back to back per window, round by
    round), as D.3 calibrates immediately before validation. The target-only rows are then exact
    by construction on both clocks; only the other methods measure the replay's error.
    """
    factors = {}
    for trace in traces:
        if trace.get("method") == "target-only" and trace.get("decode_s"):
            replayed = simulate(record_of(trace), costs, None)
            if replayed.decode_s > 0:
                prepare = trace.get("prepare_s")
                factors[calibration_key(trace)] = (
                    trace["decode_s"] / replayed.decode_s,
                    prepare / replayed.prepare_s if prepare and replayed.prepare_s else None)
    return factors


def mae(rows: list[dict], clock: str = "decode") -> dict:
    """Appendix D.3: signed error 100(TPS_replay/TPS_native - 1) per window, its mean magnitude, pooled error,
    on ``clock`` (``decode``: tokens over the decode clock; ``e2e``: over arrival to final token).

    Repeated native runs of one (window, method) count once, at their median TPS (as D.3 uses the
    median native latency), against the median of their replays.
    """
    native_key = "native_e2e_tps" if clock == "e2e" else "native_tps"
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get(native_key) and (clock != "e2e" or r.get("e2e_s")):
            groups.setdefault((r["window"], r["method"]), []).append(r)
    if not groups:
        return {"replay_mae_pct": None, "windows": 0}

    def tps(r: dict) -> float:
        return r["tokens"] / r["e2e_s"] if clock == "e2e" else r["tps"]

    errors, tokens, native_s, replay_s = [], 0, 0.0, 0.0
    for group in groups.values():
        native = statistics.median(r[native_key] for r in group)
        replay = statistics.median(tps(r) for r in group)
        errors.append(100 * (replay / native - 1))
        n = group[0]["tokens"]
        tokens, native_s, replay_s = tokens + n, native_s + n / native, replay_s + n / replay
    return {"replay_mae_pct": sum(abs(e) for e in errors) / len(errors), "windows": len(errors),
            "repeats": max(len(g) for g in groups.values()), "signed_mean_pct": sum(errors) / len(errors),
            "pooled_error_pct": 100 * (native_s / replay_s - 1), "max_abs_pct": max(abs(e) for e in errors)}
