"""What identifies the machine (and software) that measured a number.

Timings from different kinds of machine do not pool: a bench row and a device profile both
record where they were measured, and the bench's summary refuses to mix kinds unless asked.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

# the runtimes whose versions change timings; read from package metadata, never imported
RUNTIMES = ("numpy", "onnxruntime", "MNN", "ctranslate2", "faster-whisper", "torch", "transformers", "ray")


def machine_info() -> dict:
    """The CPU, usable cores, system and Python of this process's machine."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {"hostname": platform.node(), "cpu": cpu, "cores": usable, "system": platform.platform(),
            "python": platform.python_version()}


def package_versions(names: Sequence[str] = ("as2d", "as2d-whisper", "as2d-onnxruntime", "onnxruntime",
                                             "numpy")) -> dict:
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _as2d_distributions() -> list[str]:
    names = {d.metadata["Name"] for d in importlib.metadata.distributions() if d.metadata["Name"]}
    return sorted(n for n in names if n.lower().startswith("as2d"))


def machine_kind(machine: dict) -> str:
    """Machines of one kind time alike: same CPU model, usable cores and architecture (not host name)."""
    return f"{machine.get('cpu') or '?'} x{machine.get('cores')} {machine.get('arch') or '?'}"


@cache
def bench_machine() -> dict:
    """This process's machine, its kind and the versions of as2d, its plugins and the runtimes (per row)."""
    machine = {**machine_info(), "arch": platform.machine()}
    machine["kind"] = machine_kind(machine)
    machine["versions"] = package_versions([*_as2d_distributions(), *RUNTIMES])
    return machine


class MixedMachines(ValueError):
    """Rows measured on different kinds of machine, which the caller did not ask to pool."""


def check_one_kind(rows: Iterable[dict], allow: bool = False) -> list[str]:
    """The kinds of machine among ``rows``; raises :class:`MixedMachines` for more than one unless ``allow``."""
    windows: dict[str, set] = {}
    for r in rows:
        kind = (r.get("machine") or {}).get("kind")
        if kind is not None:
            windows.setdefault(kind, set()).add(r["window"])
    if len(windows) > 1 and not allow:
        kinds = "; ".join(f"{k} ({len(w)} windows)" for k, w in windows.items())
        raise MixedMachines(f"rows come from {len(windows)} kinds of machine: {kinds}; timings from different "
                            "machines do not pool (pass --pool-machines to pool them anyway)")
    return list(windows)
