"""Pricing saved trajectories under a device profile (Section 4.3, Appendix D.3, D.4.3).

A trace (docs/traces.md) fixes everything that does not depend on cost: the
target's greedy response and the drafter's published record. For the
decoupled methods that is enough to re-run the target loop at any budget:
run the engine's own target loop and proposal step (``engine.target_loop``,
``engine.PublishedProposer``) on a simulated clock, over priced stand-ins for
the target (:class:`PricedTarget`: greedy tokens from the reference) and the
record (:class:`PricedRecord`: only the batches published by that instant),
and charge each round the profile's loop cost plus the cost of its
physical width, shared-thread (concurrent) while the drafter still runs and
alone once the record is closed, as the engine switches threads. The drafter's
publication times are either re-priced from the profile (steps x step cost +
publication cost) or taken from the trace (``publication="native"``).

Serial methods (sd-k*, asp, as2d-no-td) depend on the target prefix, so they
are priced as traced: their drafting rounds plus their calls.
"""
from __future__ import annotations

import bisect
import itertools
import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from as2d_core.engine import Counters, DecodeOptions, PublishedProposer, TargetOnly, target_loop
from as2d_core.events import EventLog
from as2d_core.options import parse_budgets  # noqa: F401  (one budget-list rule, with the engine's cap)
from .costs import Costs

DECOUPLED = ("as2d", "as2d-prepared", "as2d-no-bc")
SERIAL = ("sd-k5", "sd-k6", "sd-k7", "sd-k8", "asp", "as2d-no-td")
PUBLICATION = ("profile", "native")
NO_EOS_LIMIT = 1 << 30  # a response that ended at its end token: the cap never binds in replay


@attrs.frozen
class Batch:
    tokens: tuple[int, ...]
    t: float  # native publication time (s from the request)
    steps: int  # drafter forwards that produced it
    final: bool = False
    confidences: tuple[float, ...] | None = None


@attrs.frozen
class Record:
    """What a replay needs from one trace: the reference response and the published record."""

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

    @property
    def tps(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else 0.0


def _batch_steps(trace: dict) -> list[int]:
    """Drafter forwards behind each published batch, from the trace's draft and publish spans.

    The forward that produced the end token has no span (the producer learns of it when the
    drafter yields nothing), so a final batch counts one more forward.
    """
    steps, count = [], 0
    for span in sorted(trace.get("spans", ()), key=lambda s: s["t0"]):
        if span["kind"] == "draft" and span.get("tokens"):
            count += 1
        elif span["kind"] == "publish":
            steps.append(count)
            count = 0
    return steps


def record_of(trace: dict) -> Record:
    """Read one ``as2d-trace/1`` object into what :func:`simulate` takes."""
    tokens = list(trace["tokens"])
    reference = list(tokens)
    if trace.get("calls"):
        last = trace["calls"][-1]["commit"]
        produced = ([tokens[0]] if tokens else []) + [t for c in trace["calls"] for t in c["commit"]]
        if len(produced) > len(tokens) and last:  # the last call committed the end token
            reference.append(last[-1])
    ended = len(reference) > len(tokens)
    max_new = NO_EOS_LIMIT if ended else len(tokens)
    batches = []
    if trace.get("method") in DECOUPLED:
        steps = _batch_steps(trace)
        published = trace.get("published", [])
        if len(steps) != len(published):  # spans missing: one forward per published target token
            steps = [len(b["tokens"]) for b in published]
        for b, n in zip(published, steps):
            final = bool(b.get("final"))
            batches.append(Batch(tuple(b["tokens"]), float(b["t"]), n + (1 if final else 0), final,
                                 tuple(b["confidences"]) if b.get("confidences") else None))
    drafted = sum(b.get("drafted", 0) for b in trace.get("published", ()) if "drafted" in b)
    return Record(window=trace["window"], method=trace["method"], source=trace.get("source"),
                  budget=trace.get("budget"), language=trace.get("language"), reference=tuple(reference),
                  tokens=len(tokens), max_new_tokens=max_new, batches=tuple(batches),
                  decode_s=float(trace["decode_s"]), calls=tuple(trace.get("calls", ())),
                  serial_drafted=drafted)


def publication_times(record: Record, costs: Costs, publication: str = "profile") -> list[float]:
    """When each batch becomes visible: native times, or the drafter re-priced on the profile."""
    if publication == "native":
        return [b.t for b in record.batches]
    if publication != "profile":
        raise ValueError(f"publication must be one of {PUBLICATION}")
    step = costs.draft_step(shared=True) if record.batches else 0.0
    times, t = [], 0.0
    for b in record.batches:
        t += b.steps * step + costs.publish
        times.append(t)
    return times


class _Clock:
    """The simulated clock of one replay (seconds from the request)."""

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
    proposer = PublishedProposer(published, target, options) if published is not None else TargetOnly()
    counters, trace = Counters(), []
    out.tokens = target_loop(target, proposer, EventLog(), counters, trace)
    out.proposed, out.accepted = counters.proposed, counters.accepted
    out.widths, out.target_only_steps = counters.widths, counters.target_only_steps
    out.rounds = [{"t0": t0, "t1": t1, "width": len(r["candidates"]) + 1, "accepted": r["accepted"],
                   "visible": r["published"], "alone": alone} for r, (t0, t1, alone) in zip(trace, target.calls)]
    out.decode_s = target.clock.t
    return trace


def simulate(record: Record, costs: Costs, budget: int | None, align_window: int = 8,
             publication: str = "profile", confidence_stop: float | None = None,
             eos_token: int | None = None) -> Replayed:
    """Re-run the engine's target loop on a simulated clock; ``budget=None`` means target-only."""
    speculative = budget is not None and bool(record.batches)
    drafter = costs.for_source(record.source) if speculative else costs
    if drafter is None:  # the profile does not price this drafter: its native publication times stand
        drafter, publication = costs, "native"
    times = publication_times(record, drafter, publication) if speculative else []
    clock = _Clock()
    target = PricedTarget(record.reference, _eos_of(record, eos_token), record.max_new_tokens,
                          lambda width, alone: costs.loop_for(alone) + costs.verify(width, alone=alone),
                          clock, alone=not speculative)
    published = None
    if speculative:  # causal: a round sees only what is published by its start
        published = PricedRecord(record.batches, lambda: bisect.bisect_right(times, clock.t))
    out = Replayed(record.window, record.method, record.source if speculative else None,
                   budget if speculative else None, [], 0.0)
    _run_loop(record, target, published, budget, align_window, confidence_stop, out)
    out.publication = publication if speculative else None
    t = clock.t
    finished_at = times[-1] if speculative and record.batches[-1].final else float("inf")
    if speculative and finished_at > t:  # producer drain: the forward in flight when the target ends
        step = drafter.draft_step(shared=True) if publication == "profile" else 0.0
        last = max((x for x in times if x <= t), default=0.0)
        out.drain_s = step - ((t - last) % step) if step else 0.0
    return out


def replay_native(record: Record, align_window: int = 8, confidence_stop: float | None = None) -> Replayed:
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
    out = Replayed(record.window, record.method, record.source, record.budget, [], 0.0, publication="native")
    _run_loop(record, target, PricedRecord(record.batches, visible), record.budget, align_window, confidence_stop, out)
    return out


def price_serial(record: Record, costs: Costs) -> Replayed:
    """A serial method as traced: its drafting (alone, the target waits) plus its calls (alone)."""
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
    return out


def replay_record(record: Record, costs: Costs, budget: int | None = None, align_window: int = 8,
                  publication: str = "profile") -> Replayed:
    """Price one trace; ``budget`` overrides the traced budget of a decoupled method."""
    if record.method in SERIAL:
        return price_serial(record, costs)
    if record.method == "target-only" or record.source is None:
        return simulate(record, costs, None, align_window, publication)
    if record.method == "as2d-no-bc":
        from as2d_bench.runner import NO_BC_THRESHOLD

        return simulate(record, costs, budget or record.budget, align_window, publication, NO_BC_THRESHOLD)
    return simulate(record, costs, budget or record.budget, align_window, publication)


def read_traces(paths: Iterable[str | Path]) -> list[dict]:
    """Trace objects from files (``traces.jsonl``) or directories holding one."""
    traces = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            path = path / "traces.jsonl"
        for line in path.read_text().splitlines():
            if line.strip():
                trace = json.loads(line)
                trace["_file"] = str(path)  # runs of one bench pass, for pairing with their own target-only run
                traces.append(trace)
    return traces


def row_of(replayed: Replayed, record: Record, method: str | None = None) -> dict:
    """A ``results.jsonl``-shaped row (``as2d bench``), so the bench summary applies unchanged."""
    return {
        "window": record.window, "lang": record.language, "method": method or record.method,
        "tokens": len(replayed.tokens), "decode_s": replayed.decode_s, "tps": replayed.tps,
        "exact": list(replayed.tokens) == list(record.reference[: record.tokens]),
        "proposed": replayed.proposed, "accepted": replayed.accepted, "verify_calls": len(replayed.widths),
        "verify_widths": replayed.widths, "target_only_steps": replayed.target_only_steps,
        "drain_s": replayed.drain_s, "source": replayed.source, "budget": replayed.budget,
        "publication": replayed.publication,
        "native_tps": record.tokens / record.decode_s if record.decode_s > 0 else None,
    }


def load_factors(traces: Sequence[dict], costs: Costs) -> dict[tuple[str, str], float]:
    """Per (file, window): native target-only decode time over its replay under ``costs``.

    On a machine whose load drifts (shared cores), this calibrates every cost of a window with
    the target-only run made just before it (bench runs methods back to back per window), as
    D.3 calibrates immediately before validation. The target-only rows are then exact by
    construction; only the other methods measure the replay's error.
    """
    factors = {}
    for trace in traces:
        if trace.get("method") == "target-only" and trace.get("decode_s"):
            replayed = simulate(record_of(trace), costs, None)
            if replayed.decode_s > 0:
                factors[(trace.get("_file", ""), trace["window"])] = trace["decode_s"] / replayed.decode_s
    return factors


def mae(rows: list[dict]) -> dict:
    """Appendix D.3: signed error 100(TPS_replay/TPS_native - 1) per window, its mean magnitude, pooled error.

    Repeated native runs of one (window, method) count once, at their median TPS (as D.3 uses the
    median native latency), against the median of their replays.
    """
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if r.get("native_tps"):
            groups.setdefault((r["window"], r["method"]), []).append(r)
    if not groups:
        return {"replay_mae_pct": None, "windows": 0}
    errors, tokens, native_s, replay_s = [], 0, 0.0, 0.0
    for group in groups.values():
        native = statistics.median(r["native_tps"] for r in group)
        replay = statistics.median(r["tps"] for r in group)
        errors.append(100 * (replay / native - 1))
        n = group[0]["tokens"]
        tokens, native_s, replay_s = tokens + n, native_s + n / native, replay_s + n / replay
    return {"replay_mae_pct": sum(abs(e) for e in errors) / len(errors), "windows": len(errors),
            "repeats": max(len(g) for g in groups.values()), "signed_mean_pct": sum(errors) / len(errors),
            "pooled_error_pct": 100 * (native_s / replay_s - 1), "max_abs_pct": max(abs(e) for e in errors)}
