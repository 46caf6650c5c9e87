"""How a file's windows are decoded on the windows route: in waves of how many, drafting or not, and why.

``batch_windows`` is a whole number (the user's wave size; the windows draft as the method does, unless the
device profile prices drafting in waves of that size above target-only: vLLM's switch of speculation by batch
size) or ``"auto"``, the default. Auto takes the cheapest way per committed token that the device profile prices
(``--profile``, a configuration's ``profile``: ``decode.scheduler.wave_prices`` over its ``batch_s``): waves of 1,
2, 4 or 8 windows (no more than the file has), each window drafting (as2d) or target-only. Without a profile
that measured batches it takes the default rule, ``decode.scheduler.DEFAULT_WAVE_SIZE``: waves of 4 drafting, the
fastest exact setting measured on this repository's 2 cores on as2d's own windows (BENCHMARKS.md section 15;
on faster-whisper's batched windows an AMD host measured it at 0.9x, section 45), and the route's reason says that
no profile priced it (``UNPRICED``). A serial baseline
(``sd-kN``) drafts on demand, taking turns with the target: auto leaves it one window at a time.

Whatever is chosen, each window's tokens are exactly its target-only tokens (``decode.together``); what is
chosen, and why, is ``Transcript.route`` (``as2d run --json``'s ``route``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import attrs

from as2d_core.capabilities import BeamWave, WindowGroup
from as2d_core.contracts import Request, Target
from as2d_core.decode.methods import get_method
from as2d_core.decode.options import AUTO, DecodeOptions
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.scheduler import DEFAULT_WAVE_SIZE, drafting_pays_in_waves, wave_prices
from as2d_core.decode.together import BeamsTogether, WindowsTogether


@attrs.frozen
class WaveRoute:
    """The route a file took: ``size`` windows side by side (1: one at a time), drafting or not, and why."""

    route: str  # "windows" or "seek"
    size: int = 1
    drafts: bool = False
    why: str = ""  # "profile PATH", "default rule", "batch_windows N", and what kept the windows apart
    seconds_per_token: float | None = None  # the profile's price of the choice
    beams: bool = False  # each window's beam search, its steps made with the wave's others (``BeamWave``)

    def method(self, asked: str) -> str:
        """The method each window runs: the one ``asked`` for, or target-only where the route does not draft."""
        return asked if self.drafts else "target-only"

    def as_dict(self) -> dict:
        out = {"route": self.route, "wave_size": self.size, "drafts": self.drafts, "why": self.why}
        if self.seconds_per_token is not None:
            out["priced_s_per_token"] = self.seconds_per_token
        if self.beams:
            out["beams"] = True
        return out


# beam search's waves without a size from the user: whisper-base's beam 5 on the 330 s recording took 17.77 s in
# waves of 4 and 20.76 s one window at a time, and 17.18 s in waves of 8 for 180 MB more at its peak (1,565 MB
# against 1,383 MB; fp32, 2 cores; BENCHMARKS.md section 46)
BEAM_WAVE_SIZE = 4
# what a route that drafts by default says where no profile prices it (``decode.profile.profile_path``)
UNPRICED = "no device profile of this machine prices drafting: `as2d profile` measures one"


def choose_waves(options: DecodeOptions, method: str, has_source: bool, windows: int, profile: dict | None,
                 alone_because: str | None = None) -> WaveRoute:
    """The route of ``windows`` windows decoded by ``method`` (``has_source``: a drafter is loaded), priced from
    ``profile`` (the file ``options.profile`` names, read) when ``batch_windows`` is auto. ``alone_because``:
    why these windows cannot share calls (conditioning, a target without a windows graph, ...): one at a time."""
    drafting = get_method(method).needs_source and has_source
    most = 1 if alone_because else max(1, windows)
    apart = f"; one window at a time: {alone_because}" if alone_because else ""
    if options.batch_windows != AUTO:  # the user's size; whether it drafts is still priced where a profile can
        size, why = min(options.batch_windows, most), f"batch_windows {options.batch_windows}" + apart
        if drafting and profile is not None and drafting_pays_in_waves(profile, size, windows) is False:
            return WaveRoute("windows", size, False, f"{why}; target-only: profile {options.profile} prices drafting "
                             f"in waves of {size} above target-only")
        return WaveRoute("windows", size, drafting, why)
    if drafting and get_method(method).takes_turns:
        return WaveRoute("windows", 1, True, "auto: a serial method drafts in turns with the target, one window at "
                         "a time")
    prices = wave_prices(profile, windows, can_draft=drafting) if profile is not None else None
    fitting = [p for p in prices or () if p.size <= most]
    if fitting:
        best = fitting[0]
        return WaveRoute("windows", best.size, best.drafts, f"profile {options.profile}" + apart,
                         best.seconds_per_token)
    unpriced = f" ({options.profile} has no batch costs, batch_s)" if profile is not None else ""
    unpriced = unpriced or (f" ({UNPRICED})" if drafting else "")
    return WaveRoute("windows", min(DEFAULT_WAVE_SIZE, most), drafting, "default rule" + unpriced + apart)


def choose_beam_waves(options: DecodeOptions, windows: int) -> WaveRoute:
    """The route of ``windows`` windows decoded by beam search (target-only: drafts do not pay for beams), each
    window's rows stepping with the wave's others: the user's ``batch_windows``, else waves of
    ``BEAM_WAVE_SIZE``, which no profile prices yet (BENCHMARKS.md section 46 measured the sizes)."""
    if options.batch_windows != AUTO:
        size, why = options.batch_windows, f"batch_windows {options.batch_windows}"
    else:
        size, why = BEAM_WAVE_SIZE, f"beams: waves of {BEAM_WAVE_SIZE}"
    return WaveRoute("windows", max(1, min(size, windows)), False, f"{why}; beam search side by side, target-only",
                     beams=True)


def decoded_in_waves(requests: list[Request], target: Target, group: WindowGroup | BeamWave,
                     decode_one: Callable[[Request, Target], DecodeResult]) -> Iterator[tuple[Request, DecodeResult]]:
    """The windows decoded in waves of ``group.size`` (a group of ``target``'s, or its beam wave), each window in a
    thread of its own (``decode_one``: its request on the wave's target, with its own drafter job), a wave's
    verifications, or beam steps, made together (``decode.together``); results in window order."""
    together = WindowsTogether if isinstance(group, WindowGroup) else BeamsTogether
    with ThreadPoolExecutor(group.size, thread_name_prefix="as2d-window") as pool:
        for first in range(0, len(requests), group.size):
            wave = requests[first : first + group.size]
            wave_target = together(target, group, len(wave))
            futures = [pool.submit(decode_one, request, wave_target) for request in wave]
            results = [future.result() for future in futures]  # the wave's windows all end before the next starts
            for request, result in zip(wave, results):
                yield request, result
