"""What every proposer kind does for one request, and target-only decoding, which proposes nothing."""
from __future__ import annotations

from as2d_core.contracts import BridgeFactory, Request, Source, Target, TargetSession
from as2d_core.decode.events import EventLog
from as2d_core.decode.loop import Proposer, TargetOnly
from as2d_core.decode.methods import Method
from as2d_core.decode.options import DecodeOptions


class Drafting:
    """One request's drafting by a method's proposer kind, from the request's arrival to its end.

    ``run_request`` calls, in order: ``at_arrival`` (before the target prepares), ``abandon`` (only if the
    target failed to prepare), ``after_prepare`` (``speculative``: the target's language and task can be
    drafted), ``proposer`` (when the decode clock starts), ``close`` (always, at the end; the drafters still
    running after the drain timeout are returned), then reads the result's fields. This base is
    target-only decoding: no drafter, one token per call.
    """

    def __init__(self, request: Request, target: Target, source: Source | None, method: Method,
                 options: DecodeOptions, bridge: BridgeFactory | None, events: EventLog):
        self.request, self.target, self.source, self.method = request, target, source, method
        self.options, self.bridge, self.events = options, bridge, events
        self.speculative = False

    def at_arrival(self, speculative: bool) -> None:
        """Before the target prepares (``speculative``: the task can be drafted; the language is not known)."""

    def abandon(self) -> None:
        """The target failed to prepare: the request fails, and so does its drafting."""

    def after_prepare(self, session: TargetSession, speculative: bool) -> None:
        self.speculative = speculative

    def proposer(self, session: TargetSession, timestamps, trace: list[dict]) -> Proposer:
        return TargetOnly()

    def close(self) -> list:
        """End the drafting; the drafters still running (left to ``workers.lifetimes``)."""
        return []

    @property
    def drained(self) -> bool:
        """Whether a drafter ran beside this request (its stop and join is then timed as the drain)."""
        return False

    def result_fields(self) -> dict:
        """What ``build_result`` reports of the drafting."""
        return {"source": self.source.name if self.speculative else None, "budget": None, "start": None,
                "producer_error": None, "published": 0, "batches": ()}
