"""As²d's proposer: candidates read from the published record through the bounded aligner (C.3)."""
from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from as2d_core.contracts import PublishedBatch, TargetSession
from as2d_core.decode.align import Aligner
from as2d_core.decode.events import EventLog
from as2d_core.decode.timestamps import TextView
from as2d_core.decode.options import DecodeOptions


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
    :class:`CandidateBuffer`, or replay's priced record. The target decodes on its shared threads
    while the drafter drafts, and takes all its threads (``session.use_threads``) once the record
    closes, or while a starved drafter has published nothing after the target decoded a whole
    verification's worth of tokens alone (a niced drafter on a busy host: the core left to it drafts
    nothing; BENCHMARKS.md section 48) until its first batch arrives.
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
        self.threads = options.shared_target_threads  # as the drafting kind left the session
        self.proposal = None
        self._confidences: list[float | None] = []
        self._batches_seen = 0

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        start = time.perf_counter()
        snapshot = self.record.snapshot()
        self._use_threads(snapshot, len(response))
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

    def _use_threads(self, snapshot, decoded: int) -> None:
        starved = not len(snapshot) and decoded > self.options.budget
        threads = self.options.target_threads if snapshot.closed or starved else self.options.shared_target_threads
        if threads != self.threads:
            self.session.use_threads(threads)
            self.threads = threads

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
