"""Proposer kinds, one file each: how a method's candidates are drafted for one request, set up and cleaned up.

``published`` (as2d's producer thread), ``serial`` (a drafter from the committed prefix, taking turns) and
``none`` (target-only, ``base.Drafting``). A ``decode.methods.Method`` names its kind; ``run_request`` asks
``drafting_for`` for the request's drafting and calls it at each step (``base.Drafting``).
"""
from __future__ import annotations

from as2d_core.decode.kinds.base import Drafting
from as2d_core.decode.kinds.published import PublishedDrafting
from as2d_core.decode.kinds.serial import SerialDrafting

KINDS: dict[str, type[Drafting]] = {"published": PublishedDrafting, "serial": SerialDrafting, "none": Drafting}


def drafting_for(request, target, source, method, options, bridge, events) -> Drafting:
    """The request's drafting by ``method``'s proposer kind."""
    return KINDS[method.proposer](request, target, source, method, options, bridge, events)
