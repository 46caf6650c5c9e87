"""Device profiles as files, and the per-operation costs a replay charges.

A profile (JSON or TOML) stores seconds per operation, each either a bare
number or a statistic ``{"median": s, "q1": s, "q3": s, "stdev": s, "n": n}``
(replay uses the median). Widths are string keys ("1".."16") so the same file
reads as TOML. Only widths a profile lists are priced: a missing width is an
error, never a zero cost (Appendix D.2.1).

    format = "as2d-profile/1"
    verify_s.alone.K    target call of physical width K, target alone (its full threads)
    verify_s.shared.K   the same call while the drafter runs (shared threads, concurrent slowdown)
    shared_ratio        optional: shared cost = ratio x alone cost for widths without a shared entry
    target_step_s       optional: a target-only step if it uses another entry point than verify K=1
    draft_step_s        {alone, shared}: one drafted token (a piece's time over its tokens) incl. bridge conversion,
                        for the configured source (``source.name``)
    drafters.NAME       optional: {draft_step_s, publish_s} of other sources measured on the same machine
    publish_s           one batch publication
    loop_s              residual loop work per target round (alignment, queue, interpreter)
    loop_shared_s       optional: the same while the drafter runs (as2d rounds before the record closes)
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import attrs

FORMAT = "as2d-profile/1"


class MissingCost(ValueError):
    """The profile has no measured cost for an operation a replay needs."""


def value(entry: Any) -> float | None:
    """Seconds of one profile entry: a number or a statistic's median."""
    if entry is None:
        return None
    if isinstance(entry, (int, float)):
        return float(entry)
    return float(entry["median"]) if entry.get("median") is not None else None


def _widths(table: dict | None) -> dict[int, float]:
    out = {}
    for key, entry in (table or {}).items():
        seconds = value(entry)
        if seconds is not None:
            out[int(key)] = seconds
    return out


@attrs.frozen
class Costs:
    """What one replay charges, in seconds; built from a profile by :func:`costs_of`."""

    verify_alone: dict[int, float]
    verify_shared: dict[int, float] = attrs.Factory(dict)
    shared_ratio: float | None = None
    target_step: float | None = None
    draft_step_alone: float | None = None
    draft_step_shared: float | None = None
    publish: float = 0.0
    loop: float = 0.0
    loop_shared: float | None = None  # loop work per round while the drafter runs, if measured apart
    source: str | None = None  # the drafter the draft costs belong to (None: any)
    drafters: dict = attrs.Factory(dict)  # other sources: name -> (alone, shared, publish)

    def for_source(self, name: str | None) -> "Costs | None":
        """These costs with ``name``'s drafter costs; None when the profile does not price that drafter."""
        if name is None or self.source is None or name == self.source:
            return self
        if name in self.drafters:
            alone, shared, publish = self.drafters[name]
            return attrs.evolve(self, source=name, draft_step_alone=alone, draft_step_shared=shared, publish=publish)
        return None

    def scaled(self, factor: float) -> "Costs":
        """Every cost times ``factor``: the same machine under uniformly heavier or lighter load."""
        def times(x):
            return None if x is None else x * factor
        return Costs(verify_alone={k: v * factor for k, v in self.verify_alone.items()},
                     verify_shared={k: v * factor for k, v in self.verify_shared.items()},
                     shared_ratio=self.shared_ratio, target_step=times(self.target_step),
                     draft_step_alone=times(self.draft_step_alone), draft_step_shared=times(self.draft_step_shared),
                     publish=self.publish * factor, loop=self.loop * factor, loop_shared=times(self.loop_shared),
                     source=self.source, drafters={n: tuple(times(x) for x in v) for n, v in self.drafters.items()})

    def loop_for(self, alone: bool) -> float:
        return self.loop if alone or self.loop_shared is None else self.loop_shared

    def verify(self, width: int, alone: bool) -> float:
        """One target call of physical width ``width``; ``alone`` once the drafter has finished."""
        if width == 1 and alone and self.target_step is not None:
            return self.target_step
        if not alone:
            if width in self.verify_shared:
                return self.verify_shared[width]
            if self.shared_ratio is not None and width in self.verify_alone:
                return self.verify_alone[width] * self.shared_ratio
            if width == 1 and self.target_step is not None and self.shared_ratio is not None:
                return self.target_step * self.shared_ratio
            raise MissingCost(f"no concurrent (shared) cost for physical width K={width}")
        if width in self.verify_alone:
            return self.verify_alone[width]
        raise MissingCost(f"no cost for physical width K={width}")

    def draft_step(self, shared: bool = True) -> float:
        step = self.draft_step_shared if shared else self.draft_step_alone
        step = step if step is not None else (self.draft_step_alone if shared else self.draft_step_shared)
        if step is None:
            raise MissingCost("no drafter step cost")
        return step

    def feasible_budget(self, budget: int, with_source: bool = True) -> bool:
        """Every physical width 1..budget+1 is priced (alone, and shared when a drafter runs)."""
        try:
            for width in range(1, budget + 2):
                self.verify(width, alone=True)
                if with_source:
                    self.verify(width, alone=False)
            if with_source:
                self.draft_step(True)
        except MissingCost:
            return False
        return True

    @property
    def max_width(self) -> int:
        return max(self.verify_alone) if self.verify_alone else 0


def costs_of(profile: dict) -> Costs:
    """The replay costs of a loaded profile."""
    verify = profile.get("verify_s", {})
    draft = profile.get("draft_step_s") or {}
    if not isinstance(draft, dict) or "median" in draft:
        draft = {"alone": draft, "shared": None}
    return Costs(
        verify_alone=_widths(verify.get("alone")),
        verify_shared=_widths(verify.get("shared")),
        shared_ratio=profile.get("shared_ratio"),
        target_step=value(profile.get("target_step_s")),
        draft_step_alone=value(draft.get("alone")),
        draft_step_shared=value(draft.get("shared")),
        publish=value(profile.get("publish_s")) or 0.0,
        loop=value(profile.get("loop_s")) or 0.0,
        loop_shared=value(profile.get("loop_shared_s")),
        source=(profile.get("source") or {}).get("name"),
        drafters={name: (value((d.get("draft_step_s") or {}).get("alone")), value((d.get("draft_step_s") or {}).get("shared")),
                         value(d.get("publish_s")) or 0.0) for name, d in (profile.get("drafters") or {}).items()},
    )


def load_profile(path: str | Path) -> dict:
    """Read a profile file (``.json`` or ``.toml``) and check its format tag."""
    path = Path(path)
    text = path.read_text()
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not an as2d profile (format {data.get('format')!r}, expected {FORMAT!r})")
    if not _widths(data.get("verify_s", {}).get("alone")):
        raise ValueError(f"{path}: the profile has no verification cost (verify_s.alone)")
    return data
