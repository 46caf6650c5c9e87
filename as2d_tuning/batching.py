"""Batch widths of the target's window group: what one call costs with B rows, one token or K each.

The scheduler (``as2d_core.decode.scheduler``) verifies every decode of a process in one group call per
step, and its rule drafts only while drafting pays at the batch's size (``speculate_rows_from``). That
rule is priced here: the group filled with B rows of the calibration request (B in ``rows``), each call
appending one token per row (target-only steps) or ``width`` per row (a drafted verification of the
width the real as2d decodes made), cut back after each call, ``repeats`` times after ``warmup``, the two
widths alternating so a drift touches both. ``tokens_per_call`` comes from the same real decodes, and so do
``alone_e2e_s``, their clocks from the audio's arrival to the last token, as2d's and target-only's, which say
whether drafting pays at all (``drafting_pays_alone``: the calls are not all it costs); ``as2d
select`` replaces it by what the replay of its chosen drafter and budget commits on the development windows
(``replayed_batch_profile``), so the threshold follows the choice it tunes.

The calls are not all a wave costs either: B drafters beside the target share its cores, and each encodes its
audio. ``waves_e2e_s`` times the whole thing, the way a file's windows are decoded (``input.waves``): B copies of the
calibration request decoded side by side in one wave, as2d and target-only, from the first audio's arrival to the
last token. Where a profile has them, they price the waves and the server's rule (``scheduler.timed_waves``).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import attrs

from as2d_core.capabilities import WindowBatching
from as2d_core.contracts import BridgeFactory, Request, Source, Target
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.scheduler import speculate_rows_from
from as2d_core.input.waves import decoded_in_waves

from .stats import stat

ROWS = (1, 2, 4, 8)


def drafted_calls(results) -> tuple[float, int] | None:
    """Tokens committed per target call, and the calls' mean width, over real as2d decodes (None: no call)."""
    calls = sum(r.verify_calls + r.target_only_steps for r in results)
    widths = [w for r in results for w in r.verify_widths]
    if not calls or not widths:
        return None
    return sum(len(r.tokens) for r in results) / calls, max(2, round(sum(widths) / len(widths)))


def batch_sweep(target: Target, request: Request, threads: int, sequence: Sequence[int], width: int,
                rows: Sequence[int] = ROWS, repeats: int = 5, warmup: int = 1) -> dict | None:
    """{"rows": {B: {"1": stat, str(width): stat}}}, or None for a target without a window group."""
    group = target.window_group(max(rows), threads) if isinstance(target, WindowBatching) else None
    if group is None:
        return None
    sessions = []
    out: dict = {}
    try:
        for count in sorted(rows):
            while len(sessions) < count:
                sessions.append(group.prepare(request, threads))
            samples: dict[int, list[float]] = {1: [], width: []}
            for rep in range(warmup + repeats):
                for k in ((1, width) if rep % 2 else (width, 1)):
                    call = [(s, sequence[0], list(sequence[1:k])) for s in sessions]
                    start = time.perf_counter()
                    group.verify_rows(call)
                    elapsed = time.perf_counter() - start
                    for s in sessions:
                        s.truncate(0)
                    if rep >= warmup:
                        samples[k].append(elapsed)
            out[str(count)] = {str(k): stat(v, f"a window-group call of {count} rows, {k} wide")
                               for k, v in samples.items()}
    finally:
        for s in sessions:
            s.close()
    return {"rows": out}


@attrs.frozen
class WaveDecodes:
    """What decodes the waves: the target, the configured drafter and its bridge, the options, the reference
    tokens every row must give (target-only's on the calibration request)."""

    target: Target
    source: Source
    bridge: BridgeFactory | None
    options: DecodeOptions
    reference: Sequence[int]


def time_waves(decodes: WaveDecodes, request: Request, rows: Sequence[int] = ROWS[1:], rounds: int = 2
                ) -> dict | None:
    """{str(B): {"as2d": s, "target-only": s}}: the medians over ``rounds`` of one wave of B copies of ``request``
    decoded side by side (each row in a thread, its verifications gathered, as a file's windows are), from the
    wave's start to its last token; the two methods alternate so a drift touches both. None for a target without a
    window group. A row whose tokens are not the reference's fails the profile: a wave must be exact."""
    target, threads = decodes.target, decodes.options.target_threads
    if not isinstance(target, WindowBatching):
        return None
    groups = {b: target.window_group(b, threads) for b in rows}
    if any(group is None for group in groups.values()):
        return None
    samples: dict[int, dict[str, list[float]]] = {b: {"as2d": [], "target-only": []} for b in rows}
    for round_ in range(rounds):
        for b in rows:
            copies = [attrs.evolve(request, request_id=f"{request.request_id}-row{i}") for i in range(b)]
            for method in (("as2d", "target-only") if round_ % 2 == 0 else ("target-only", "as2d")):
                def decode_one(row: Request, wave_target: Target, method: str = method) -> object:
                    source = decodes.source if method == "as2d" else None
                    return run_request(row, wave_target, source, method, decodes.options, bridge=decodes.bridge)

                start = time.perf_counter()
                results = [result for _, result in decoded_in_waves(copies, target, groups[b], decode_one)]
                samples[b][method].append(time.perf_counter() - start)
                wrong = [r.request_id for r in results if list(r.tokens) != list(decodes.reference)]
                if wrong:
                    raise RuntimeError(f"a wave of {b} rows ({method}) gave other tokens than target-only alone on "
                                       f"{', '.join(wrong)}: not exact")
    return {str(b): {m: statistics.median(v) for m, v in by.items()} for b, by in samples.items()}


def batch_section(target: Target, request: Request, threads: int, sequence: Sequence[int], drafted, alone,
                  slowdown: dict | None, repeats: int, warmup: int, waves: WaveDecodes | None = None) -> dict | None:
    """The profile's ``batch_s``: the sweep at the width real as2d calls had, the real decodes' clocks (``drafted``,
    as2d, and ``alone``, target-only, on the same request: ``alone_e2e_s``), the waves' clocks where ``waves`` says
    how to decode them (``waves_e2e_s``, with the tokens of one row), and the rule's threshold from them."""
    found = drafted_calls(drafted)
    if found is None:
        return None
    tokens_per_call, width = found
    swept = batch_sweep(target, request, threads, sequence, width, repeats=repeats, warmup=warmup)
    if swept is None:
        return None
    section = {"width": width, "tokens_per_call": tokens_per_call, **swept,
               "alone_e2e_s": {"as2d": statistics.median(r.e2e_s for r in drafted),
                               "target-only": statistics.median(r.e2e_s for r in alone)}}
    clocks = time_waves(waves, request) if waves is not None else None
    if clocks is not None:
        section["waves_e2e_s"], section["wave_row_tokens"] = clocks, len(waves.reference)
    verify_slowdown = (slowdown or {}).get("verify_shared_over_alone", {}).get(str(width))
    if verify_slowdown is not None:  # the section prices on its own, whatever profile it is copied into
        section["verify_slowdown"] = verify_slowdown
    section["speculate_rows"] = speculate_rows_from({"batch_s": section, "slowdown": slowdown or {}})
    return section


def replayed_batch_profile(profile: dict, replays, note: str) -> dict | None:
    """``profile`` with its batch costs' ``tokens_per_call`` and threshold taken from replayed decodes (``Replayed``:
    the chosen drafter and budget on the development windows it drafts; a window in a language it does not serve
    runs target-only whatever the batch) instead of the profile's calibration decodes; None where the profile
    measured no batches or the replays made no target call.

    The calls are still priced at the width the profile swept (``batch_s.width``): the replay changes how many tokens
    a drafting row commits per call, the profile alone says what a call costs. Both figures are kept in the copy, and
    so are the profile's own real decodes' clocks (``alone_e2e_s``, its configured drafter's): where they say
    drafting loses alone, the copy drafts in no batch whatever the replay commits. Where the profile timed whole
    waves (``waves_e2e_s``), those clocks price the threshold, as measured with the profile's own drafter.
    """
    section = profile.get("batch_s")
    calls = sum(len(r.widths) + r.target_only_steps for r in replays)
    if not section or not calls:
        return None
    widths = [w for r in replays for w in r.widths]
    replayed = {**section, "tokens_per_call": sum(len(r.tokens) for r in replays) / calls,
                "profiled_tokens_per_call": section["tokens_per_call"],
                "profiled_speculate_rows": section.get("speculate_rows"),
                "replayed_mean_width": sum(widths) / len(widths) if widths else 1.0, "tokens_per_call_from": note}
    copy = {**profile, "batch_s": replayed}
    replayed["speculate_rows"] = speculate_rows_from(copy)
    return copy
