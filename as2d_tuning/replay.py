"""Pricing saved trajectories under a device profile (Section 4.3, Appendix D.3, D.4.3), on both clocks.

A trace (docs/traces.md) fixes everything that does not depend on cost: the target's greedy
response and the drafter's work (its pieces and what each made publishable). For the decoupled
methods that is enough to re-run the request at any budget, drafter niceness and start: the
drafter's work is priced on the profile (its encoder by audio length, each piece, the end of the
job) and laid on a timeline beside the target's preparation and then its verification, slowed by
each other as the profile measured at that niceness (:func:`timeline`); the target loop is then the
engine's own loop (``decode.loop.target_loop``, ``decode.proposers.PublishedProposer``) run on a simulated
clock over priced stand-ins (``standins``) for the target (:class:`PricedTarget`: greedy tokens from the
reference) and the record (:class:`PricedRecord`: only what is published by that instant), each round charged the
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
from collections.abc import Sequence

import attrs

from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Counters, TargetOnly, target_loop
from as2d_core.decode.methods import get_method
from as2d_core.decode.options import DEFAULTS, STARTS, DecodeOptions
from as2d_core.decode.proposers import PublishedProposer

from .costs import Contention, Costs, DrafterCosts
from .records import NO_EOS_LIMIT, Batch, Record
from .standins import Clock, PricedRecord, PricedTarget


PUBLICATION = ("profile", "native")


CLOCKS = ("e2e", "decode")  # the user's clock (arrival to final token) and the paper's (after preparation)


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
    clock = Clock()
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
    clock = Clock()
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
