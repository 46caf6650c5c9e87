"""Saved trajectories (docs/traces.md) read into what a replay needs: :class:`Record`.

A record holds what does not depend on cost: the target's greedy response, the batches the drafter
published and its work piece by piece (:class:`Unit`), so a replay can price them again.
"""
from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from as2d_core.decode.methods import get_method


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
