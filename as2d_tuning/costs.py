"""Device profiles as files, and the per-operation costs a replay charges.

A profile (JSON or TOML) stores seconds per operation, each either a bare
number or a statistic ``{"median": s, "q1": s, "q3": s, "stdev": s, "n": n}``
(replay uses the median). Widths and audio lengths are string keys ("1".."16",
"2.5") so the same file reads as TOML. Only widths a profile lists are priced:
a missing width is an error, never a zero cost (Appendix D.2.1).

    format = "as2d-profile/1"
    verify_s.alone.K    target call of physical width K, target alone (its full threads)
    verify_s.shared.K   the same call while the configured drafter runs (shared threads, concurrent slowdown)
    sweep_scale         optional: real decode steps over the sweep's width-1 call; every verification cost
                        (alone, shared, beside each drafter) is priced times it
    shared_ratio        optional: shared cost = ratio x alone cost for widths without a shared entry
    target_step_s       optional: a target-only step if it uses another entry point than verify K=1
    prepare_s           optional: {alone: {L: s}, line: {intercept, slope}, detect_extra: s}: the target's
                        preparation (audio encoding, prompt prefill) alone, by audio seconds L, with the language
                        named (priced on ``line`` when given), and what detecting the language adds; without it
                        only the decode clock is priced
    draft_step_s        {alone, shared}: one drafted token incl. bridge conversion, for the configured source
    drafters.NAME       per drafter, either {draft_step_s, publish_s} (a step cost, as the paper's phones give it)
                        or what ``as2d profile`` measures: prepare_s {L: s} (its encoder alone), piece_s {first,
                        next, per_token, end} (a piece's cost alone), publish_s, and per niceness N
                        niceness.N {verify_s {K: s} (the target beside it), target_slowdown {prepare},
                        drafter_slowdown {prepare, verify}} (ratios to alone), and at the configured niceness
                        ``episodes``: the same ratios in the engine's own as2d decodes, which replay prefers
    publish_s           one batch publication
    loop_s              residual loop work per target round (alignment, queue, interpreter)
    loop_shared_s       optional: the same while the drafter runs (as2d rounds before the record closes)
"""
from __future__ import annotations

import bisect
import statistics
from pathlib import Path
from typing import Any

import attrs

from as2d_core.decode.profile import read_profile


class MissingCost(ValueError):
    """The profile has no measured cost for an operation a replay needs."""


def value(entry: Any) -> float | None:
    """Seconds of one profile entry: a number or a statistic's median."""
    if entry is None:
        return None
    if isinstance(entry, (int, float)):
        return float(entry)
    return float(entry["median"]) if entry.get("median") is not None else None


def _widths(table: dict | None, scale: float = 1.0) -> dict[int, float]:
    out = {}
    for key, entry in (table or {}).items():
        seconds = value(entry)
        if seconds is not None:
            out[int(key)] = seconds * scale
    return out


def _lengths(table: dict | None) -> dict[float, float]:
    return {float(key): value(entry) for key, entry in (table or {}).items() if value(entry) is not None}


def interpolate(table: dict[float, float], x: float | None) -> float:
    """``table`` (audio seconds -> seconds) at ``x``: linear between measured lengths, the nearest end
    outside them, the median when ``x`` is unknown (a trace without its audio length)."""
    if not table:
        raise MissingCost("no cost by audio length")
    keys = sorted(table)
    if x is None:
        return statistics.median(table.values())
    i = bisect.bisect_left(keys, x)
    if i == 0:
        return table[keys[0]]
    if i == len(keys):
        return table[keys[-1]]
    lo, hi = keys[i - 1], keys[i]
    return table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)


@attrs.frozen
class Contention:
    """One drafter at one niceness beside the target: the target's calls on its shared threads, and the
    slowdowns (ratios to alone) of the target's preparation and of the drafter's own work."""

    verify_shared: dict[int, float] = attrs.Factory(dict)
    target_prepare: float = 1.0
    drafter_prepare: float = 1.0  # the drafter beside the target's preparation
    drafter_verify: float = 1.0  # the drafter beside the target's verification


@attrs.frozen
class DrafterCosts:
    """What one drafter's work costs alone: its encoder by audio length, a piece, the end of a job."""

    name: str | None
    prepare: dict[float, float] = attrs.Factory(dict)  # empty: not measured (a step-cost profile)
    first: float = 0.0
    next: float = 0.0
    per_token: float = 0.0
    end: float = 0.0
    publish: float = 0.0
    contention: dict[int, Contention] = attrs.Factory(dict)

    def piece(self, index: int, tokens: int) -> float:
        return (self.first if index == 0 else self.next) + self.per_token * tokens

    def prepare_at(self, audio_s: float | None) -> float | None:
        return interpolate(self.prepare, audio_s) if self.prepare else None

    @property
    def niceness(self) -> list[int]:
        return sorted(self.contention)

    def at(self, niceness: int | None) -> Contention:
        """The contention at the measured niceness nearest to ``niceness`` (alone costs if none was measured)."""
        if not self.contention:
            return Contention()
        wanted = 0 if niceness is None else niceness
        return self.contention[min(self.contention, key=lambda n: (abs(n - wanted), n))]

    def scaled(self, factor: float, verify_factor: float | None = None) -> "DrafterCosts":
        """Its work times ``factor``; the target's calls beside it times ``verify_factor`` (default ``factor``)."""
        verify_factor = factor if verify_factor is None else verify_factor
        return attrs.evolve(self, prepare={k: v * factor for k, v in self.prepare.items()}, first=self.first * factor,
                            next=self.next * factor, per_token=self.per_token * factor, end=self.end * factor,
                            publish=self.publish * factor,
                            contention={n: attrs.evolve(c, verify_shared={k: v * verify_factor
                                                                          for k, v in c.verify_shared.items()})
                                        for n, c in self.contention.items()})


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
    prepare_alone: dict[float, float] = attrs.Factory(dict)  # the target's preparation by audio seconds
    detect_extra: float | None = None
    measured: dict[str, DrafterCosts] = attrs.Factory(dict)  # drafters measured by ``as2d profile``

    def drafter(self, name: str | None) -> DrafterCosts | None:
        """``name``'s costs; None when the profile does not price that drafter."""
        if name in self.measured:
            return self.measured[name]
        if name is None or self.source is None or name == self.source:
            if name is None and len(self.measured) == 1:
                return next(iter(self.measured.values()))
            if self.draft_step_alone is None and self.draft_step_shared is None:
                return None
            return self._stepped(name, self.draft_step_alone, self.draft_step_shared, self.publish, self.verify_shared)
        if name in self.drafters:
            return self._stepped(name, *self.drafters[name], self.verify_shared)
        return None

    def _stepped(self, name, alone, shared, publish, verify_shared) -> DrafterCosts:
        """A drafter priced by one step per drafted token (the paper's phones); the forward that finds the end
        token is one more step; the target beside it costs ``verify_shared`` (or ``shared_ratio``)."""
        alone = alone if alone is not None else shared
        shared = shared if shared is not None else alone
        return DrafterCosts(name, per_token=alone, end=alone, publish=publish,
                            contention={0: Contention(dict(verify_shared), drafter_verify=shared / alone if alone else 1.0)})

    def scaled(self, factor: float, prepare_factor: float | None = None) -> "Costs":
        """Every cost times ``factor``: the same machine under uniformly heavier or lighter load.

        ``prepare_factor`` (default ``factor``) scales the preparation instead, and the drafters' work,
        which mostly runs beside it: on shared cores the two-thread encoder and the one-thread decode
        steps slow by different amounts.
        """
        prepare_factor = factor if prepare_factor is None else prepare_factor

        def times(x):
            return None if x is None else x * factor

        return Costs(verify_alone={k: v * factor for k, v in self.verify_alone.items()},
                     verify_shared={k: v * factor for k, v in self.verify_shared.items()},
                     shared_ratio=self.shared_ratio, target_step=times(self.target_step),
                     draft_step_alone=times(self.draft_step_alone), draft_step_shared=times(self.draft_step_shared),
                     publish=self.publish * factor, loop=self.loop * factor, loop_shared=times(self.loop_shared),
                     source=self.source, drafters={n: tuple(times(x) for x in v) for n, v in self.drafters.items()},
                     prepare_alone={k: v * prepare_factor for k, v in self.prepare_alone.items()},
                     detect_extra=None if self.detect_extra is None else self.detect_extra * prepare_factor,
                     measured={n: d.scaled(prepare_factor, factor) for n, d in self.measured.items()})

    def loop_for(self, alone: bool) -> float:
        return self.loop if alone or self.loop_shared is None else self.loop_shared

    def prepare(self, audio_s: float | None, named: bool = True) -> float | None:
        """The target's preparation alone; None when the profile has no preparation costs."""
        if not self.prepare_alone:
            return None
        extra = 0.0 if named else (self.detect_extra or 0.0)
        return interpolate(self.prepare_alone, audio_s) + extra

    def verify(self, width: int, alone: bool, contention: Contention | None = None) -> float:
        """One target call of physical width ``width``; ``alone`` once the drafter has finished (else beside
        the drafter: its ``contention``'s costs when measured)."""
        if width == 1 and alone and self.target_step is not None:
            return self.target_step
        if not alone:
            if contention is not None and width in contention.verify_shared:
                return contention.verify_shared[width]
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

    def feasible_budget(self, budget: int, with_source: bool = True, source: str | None = None,
                        niceness: int | None = None) -> bool:
        """Every physical width 1..budget+1 is priced (alone, and beside the drafter when one runs)."""
        try:
            drafter = self.drafter(source) if with_source else None
            if with_source and drafter is None:
                return False
            contention = drafter.at(niceness) if drafter is not None else None
            for width in range(1, budget + 2):
                self.verify(width, alone=True)
                if with_source:
                    self.verify(width, alone=False, contention=contention)
        except MissingCost:
            return False
        return True


def _measured_drafter(name: str, entry: dict, scale: float = 1.0) -> DrafterCosts | None:
    """A drafter as ``as2d profile`` measures it (None for a step-cost entry)."""
    piece = entry.get("piece_s")
    if not piece:
        return None
    contention = {}
    for nice, c in (entry.get("niceness") or {}).items():
        episodes = c.get("episodes") or {}  # the engine's own decodes, where measured, over the contention rounds
        target = {**(c.get("target_slowdown") or {}), **(episodes.get("target_slowdown") or {})}
        drafter = {**(c.get("drafter_slowdown") or {}), **(episodes.get("drafter_slowdown") or {})}
        contention[int(nice)] = Contention(_widths(c.get("verify_s"), scale), target.get("prepare", 1.0),
                                           drafter.get("prepare", 1.0), drafter.get("verify", 1.0))
    return DrafterCosts(name, _lengths(entry.get("prepare_s")), piece.get("first", 0.0), piece.get("next", 0.0),
                        piece.get("per_token", 0.0), piece.get("end", 0.0), value(entry.get("publish_s")) or 0.0,
                        contention)


def costs_of(profile: dict) -> Costs:
    """The replay costs of a loaded profile."""
    verify = profile.get("verify_s", {})
    draft = profile.get("draft_step_s") or {}
    if not isinstance(draft, dict) or "median" in draft:
        draft = {"alone": draft, "shared": None}
    entries = profile.get("drafters") or {}
    scale = profile.get("sweep_scale") or 1.0
    measured = {name: d for name, d in ((n, _measured_drafter(n, e, scale)) for n, e in entries.items())
                if d is not None}
    prepare = profile.get("prepare_s") or {}
    line = prepare.get("line")
    alone = _lengths(prepare.get("alone"))
    if line and alone:  # priced on the line through the samples: noise at one length does not set its price
        alone = {length: line["intercept"] + line["slope"] * length for length in alone}
    return Costs(
        verify_alone=_widths(verify.get("alone"), scale),
        verify_shared=_widths(verify.get("shared"), scale),
        shared_ratio=profile.get("shared_ratio"),
        target_step=value(profile.get("target_step_s")),
        draft_step_alone=value(draft.get("alone")),
        draft_step_shared=value(draft.get("shared")),
        publish=value(profile.get("publish_s")) or 0.0,
        loop=value(profile.get("loop_s")) or 0.0,
        loop_shared=value(profile.get("loop_shared_s")),
        source=(profile.get("source") or {}).get("name"),
        drafters={name: (value((d.get("draft_step_s") or {}).get("alone")), value((d.get("draft_step_s") or {}).get("shared")),
                         value(d.get("publish_s")) or 0.0) for name, d in entries.items() if name not in measured},
        prepare_alone=alone,
        detect_extra=value(prepare.get("detect_extra")),
        measured=measured,
    )


def load_profile(path: str | Path) -> dict:
    """Read a profile file (``.json`` or ``.toml``: the core's one loader, which checks its format tag) and check
    that it has what the tuning commands price with."""
    data = read_profile(path)
    if not _widths(data.get("verify_s", {}).get("alone")):
        raise ValueError(f"{path}: the profile has no verification cost (verify_s.alone)")
    return data
