"""What identifies the machine (and software) that measured a number.

Timings from different kinds of machine do not pool: a bench row and a device profile both
record where they were measured, and the bench's summary refuses to mix kinds unless asked.
"""
from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable, Sequence
from functools import cache

from as2d_core.decode.profile import this_machine

# the runtimes whose versions change timings; read from package metadata, never imported
RUNTIMES = ("numpy", "onnxruntime", "MNN", "ctranslate2", "faster-whisper", "torch", "transformers", "ray")


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


@cache
def bench_machine() -> dict:
    """This process's machine, its kind and the versions of as2d, its plugins and the runtimes (per row)."""
    machine = dict(this_machine())
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
