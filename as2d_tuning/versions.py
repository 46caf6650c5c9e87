"""Which code, models and machine made a profile, and why a profile may misprice traces (``staleness``).

A profile records the as2d version with a hash of the code that measured it, each model folder's
identity and the machine; ``as2d replay`` compares them with what ran the traces and warns.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path

from as2d_bench.machine import bench_machine
from as2d_core.setup.source_spec import SourceSpec


# Packages whose code decides what a profile measures; their sources are hashed into the profile.
CODE_PACKAGES = ("as2d_core", "tokenizer_bridges")


def model_version(models_dir: Path, name: str) -> dict:
    """A model folder's identity: hash of its metadata and the sizes of its files (weights not re-read)."""
    folder = Path(models_dir) / SourceSpec.parse(name).name
    if not folder.is_dir():
        return {"name": name, "folder": None}
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    meta = folder / "model.json"
    digest = hashlib.sha256(meta.read_bytes() if meta.exists() else repr(files).encode()).hexdigest()[:16]
    return {"name": name, "folder": str(folder), "files": files, "meta_sha256_16": digest}


def code_version(packages: Sequence[str]) -> dict:
    """The code that made a profile: the as2d version and a hash of the named packages' Python sources.

    The version alone does not change from commit to commit; the hash does, so ``as2d replay`` can
    tell a profile made by other code.
    """
    digest = hashlib.sha256()
    hashed = []
    for name in sorted(set(packages)):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        folder = Path(next(iter(spec.submodule_search_locations)))
        hashed.append(name)
        for path in sorted(folder.rglob("*.py")):
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    try:
        version = importlib.metadata.version("as2d")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"as2d": version, "packages": hashed, "sha256_16": digest.hexdigest()[:16]}


def part_packages(*parts) -> list[str]:
    """The top-level packages whose code runs a target or source (a drafter in its own process: the core's)."""
    return [*CODE_PACKAGES, *(type(p).__module__.split(".")[0] for p in parts if p is not None)]


def _same_kind(a: dict, b: dict) -> bool:
    """Two machines time alike: same CPU model and usable cores (and architecture and vector instructions, where
    both say); a machine described by its host name only is that host."""
    if not (a.get("cpu") and b.get("cpu")):
        return bool(a.get("hostname")) and a.get("hostname") == b.get("hostname")
    keys = ["cpu", "cores"] + [k for k in ("arch", "isa") if a.get(k) and b.get(k)]
    return all(a.get(k) == b.get(k) for k in keys)


def _traced_machines(paths: Sequence[Path]) -> list[dict]:
    """The machines that ran these traces, from the bench rows beside them (``results.jsonl``)."""
    machines = {}
    for path in paths:
        results = (Path(path) if Path(path).is_dir() else Path(path).parent) / "results.jsonl"
        if results.is_file():
            for line in results.read_text().splitlines():
                machine = json.loads(line).get("machine") if line.strip() else None
                if machine:
                    machines[machine.get("kind") or repr(sorted(machine.items()))] = machine
    return list(machines.values())


def staleness(profile: dict, trace_paths: Sequence[Path] = ()) -> tuple[list[str], bool]:
    """Why ``profile`` may misprice these traces, and whether it was made on the kind of machine that ran them.

    It warns of a profile made on another kind of machine (than the traces', else this one), by
    other code (the hash of the core's and the parts' sources), or on other models than those
    installed here.
    """
    from as2d_core.setup.paths import models_dir

    warnings = []
    made = profile.get("machine") or {}
    ran = _traced_machines(trace_paths)
    where = "the machine that ran the traces" if ran else "this machine"
    same = bool(made) and all(_same_kind(made, m) for m in (ran or [bench_machine()]))
    if not same:
        warnings.append(f"the profile was made on another machine ({made.get('cpu') or '?'}, {made.get('cores')} "
                        f"cores) than {where}: its costs are that machine's")
    code = profile.get("code")
    if not code:
        warnings.append("the profile does not say which code made it (it predates code versions): "
                        "run as2d profile again")
    elif code_version(code.get("packages", CODE_PACKAGES))["sha256_16"] != code.get("sha256_16"):
        warnings.append(f"the profile was made by other code ({', '.join(code.get('packages', []))} changed "
                        "since): run as2d profile again")
    models = profile.get("models") or {}
    for name, then in [("target", models.get("target")), *(models.get("sources") or {}).items()]:
        if then and then.get("folder"):
            now = model_version(models_dir(), then["name"])
            if now.get("folder") and (now["meta_sha256_16"], now["files"]) != (then["meta_sha256_16"], then["files"]):
                warnings.append(f"the profile was made with another {then['name']} than the one installed here")
    return warnings, same
