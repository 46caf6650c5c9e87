"""Measuring a device profile on the configured backends (Appendix B.2, D.2.1, D.2.2).

Everything goes through the Target/Source contracts, so any backend plugin (and a drafter in
its own process) is profiled the same way, and the costs are those of what the engine does:

- the target's preparation (audio encoding, language, prompt prefill) alone, by audio length,
  and beside a drafter drafting from arrival at each niceness: their ratio is how much drafting
  from arrival slows the target's preparation;
- target verification at every physical width K = 1..Kmax at several prefix offsets: the cache
  is filled with a known continuation up to the offset, a width-K call appends root + K-1 known
  tokens and is cut back; each (offset, K) is measured ``repeats`` times after ``warmup``
  untimed calls, widths shuffled per repeat so slow drifts touch all widths alike. Once alone
  (the target's full threads) and, for each drafter and niceness, on the shared threads with
  the drafter drafting beside it (the engine's threads while drafting);
- each drafter's whole jobs (its encoder in ``prepare``, then every piece with its bridge
  conversion, then the call that finds the job over) on real speech cut to several lengths,
  alone; a piece's cost is fitted as a fixed part plus a part per token. Then, at each
  niceness, in a fresh thread at that niceness as the engine's producer is, in rounds that take
  each in turn (so a drift of a shared machine touches all alike): the target's preparation
  alone and beside the drafter, and the drafter's job alone, beside the target's preparation
  and beside its verification: the slowdowns the replay applies;
- the residual loop cost per target round: decode clock minus target time, over rounds, in
  real target-only and as2d decodes; and one publication;
- from the real decodes too: the target's own steps, which set the level of the width sweep
  (``sweep_scale``), and each drafter's slowdowns as the engine runs it at the configured niceness
  (``episodes``), which the replay prefers to the contention rounds'.

A measurement that collects no sample is a :class:`~as2d_tuning.stats.ProfileError` naming it. Medians
are kept with their spread (quartiles, standard deviation, n).

This module assembles the profile file (:func:`build_profile`). The measuring is in ``measurement``
(what is measured, in which order), ``timing`` (one operation at a time), ``contention`` (a drafter and
the target side by side), ``stats`` (medians, fits, R(K)) and ``versions`` (which code, models and
machine made it); the figure is in ``plots``.
"""
from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import attrs

from as2d_bench.machine import bench_machine, package_versions

from as2d_core.decode.profile import FORMAT
from .measurement import Measurement
from .versions import code_version, model_version, part_packages


def build_profile(config, measurement: Measurement, models_dir: Path | None = None) -> dict:
    """A complete profile file for ``config`` (a validated :class:`as2d_core.setup.config.Config`)."""
    started = time.perf_counter()
    body = measurement.run()
    target = measurement.target
    names = list(measurement.sources)
    header = {
        "format": FORMAT,
        "name": (config.device_profile or {}).get("name", platform.node()),
        "description": (config.device_profile or {}).get("description"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": round(time.perf_counter() - started, 1),
        "config": str(config.path),
        "machine": bench_machine(),
        "packages": package_versions(),
        "code": code_version(part_packages(target, *measurement.sources.values())),
        "target": {"model": config.target.model, "backend": config.target.backend, "device": config.target.device,
                   "threads": config.decode.target_threads, "shared_threads": config.decode.shared_target_threads,
                   "devices_in_use": _jsonable(target.device_in_use)},
        "source": None if config.source is None else {
            "name": names[0] if names else config.source.name, "backend": config.source.backend,
            "device": config.source.device, "threads": config.decode.drafter_threads,
            "publication_size": config.decode.publication_size, "process": config.source.process},
        "options": attrs.asdict(measurement.options),
        "protocol": {"widths": f"1..{measurement.kmax}", "offsets": list(measurement.offsets),
                     "repeats": measurement.repeats, "warmup": measurement.warmup,
                     "lengths_s": list(measurement.lengths), "job_repeats": measurement.job_repeats,
                     "niceness": list(measurement.niceness), "decodes": measurement.decodes,
                     "language": measurement.language,
                     "statistic": "median (q1, q3, mean, stdev, n kept)", "units": "seconds"},
        "measured": ["prepare_s.alone by audio length", "verify_s.alone K1..%d" % measurement.kmax, "loop_s"] + [
            f"drafters.{n}: jobs alone by audio length; beside the target at niceness "
            + ", ".join(map(str, measurement.niceness)) for n in names],
        "missing": [] if names else ["no source configured: no drafter or concurrent costs"],
    }
    if "batch_s" in body:
        header["measured"].append("batch_s: window-group calls by batch size, 1 and %d wide" % body["batch_s"]["width"])
    if "detect_missing" in body["prepare_s"]:
        header["missing"].append(f"language detection: {body['prepare_s']['detect_missing']}")
    if models_dir is not None:
        header["models"] = {"target": model_version(models_dir, config.target.model),
                            "sources": {n: model_version(models_dir, n) for n in names}}
    header["duration_s"] = round(time.perf_counter() - started, 1)
    return {**header, **body}


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)
