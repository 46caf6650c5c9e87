"""Reading a device profile (``as2d profile``'s file): the one loader of every command that takes ``--profile``.

``as2d run`` prices ``batch_windows = "auto"`` from it (``scheduler.wave_prices``), ``as2d serve`` its
``--speculate-rows`` (``scheduler.speculate_rows_from``), and the tuning commands (``as2d replay``, ``as2d
select``) their costs; each checks here that the file is a profile, then reads the sections it needs.

Whether drafting pays depends on the machine (the same drafter costs a fifth of the target's work on one CPU and
three quarters on another), so ``profile = "auto"``, the default, takes this machine's own: the newest profile
of the same target and drafter in the profiles folder (``$AS2D_PROFILES_DIR``, else
``~/.local/share/as2d/profiles``, where ``as2d profile`` writes) made on a machine of this one's kind: the same
CPU model, usable cores, architecture and vector instructions (:func:`this_machine`).
"""
from __future__ import annotations

import functools
import json
import os
import platform
import re
import tomllib
from pathlib import Path

from as2d_core.decode.options import AUTO

FORMAT = "as2d-profile/1"
NONE = "none"  # the profile option's word for no profile (AUTO: this machine's own, if there is one)
ENV_PROFILES_DIR = "AS2D_PROFILES_DIR"
# the widest vector instructions, by the flag /proc/cpuinfo names them with (x86, then Arm): kernels differ by them
_VECTOR_FLAGS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sve2", "sve2"), ("sve", "sve"),
                 ("asimd", "neon"))


class NotAProfile(ValueError):
    """A file that is missing, unreadable or not an as2d device profile; the message says which, in one line."""


def read_profile(path: str | Path) -> dict:
    """The profile at ``path`` (``.json``, or ``.toml``), its format tag checked; :class:`NotAProfile` otherwise."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise NotAProfile(f"{path}: cannot read the device profile ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except ValueError as exc:  # not UTF-8 text, not JSON, not TOML: each a ValueError
        raise NotAProfile(f"{path}: not an as2d device profile (not {path.suffix.lstrip('.') or 'JSON'}: "
                          f"{exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise NotAProfile(f"{path}: not an as2d device profile (format {found!r}, expected {FORMAT!r}; "
                          "made by `as2d profile`)")
    return data


def cached_profile(path: str | Path) -> dict:
    """``read_profile``, read once per version of the file (its modification time): for callers on every request."""
    try:
        version = os.stat(path).st_mtime_ns
    except OSError:
        return read_profile(path)  # raises NotAProfile, saying why
    return _read_version(str(path), version)


@functools.lru_cache(maxsize=8)
def _read_version(path: str, version: int) -> dict:
    return read_profile(path)


def vector_isa(flags: set[str] | frozenset[str]) -> str:
    """The widest vector instruction set among a CPU's ``flags`` (``/proc/cpuinfo``'s), or "" if none is known."""
    return next((isa for flag, isa in _VECTOR_FLAGS if flag in flags), "")


def machine_kind(machine: dict) -> str:
    """Machines of one kind time alike: the same CPU model, usable cores, architecture and vector instructions
    (two hosts that both call their CPU "AMD EPYC" may have AVX2 or AVX-512); the host name does not count."""
    kind = f"{machine.get('cpu') or '?'} x{machine.get('cores')} {machine.get('arch') or '?'}"
    return f"{kind} {machine['isa']}" if machine.get("isa") else kind


@functools.cache
def this_machine() -> dict:
    """This process's machine: CPU model, usable cores, architecture, vector instructions, system, Python, kind."""
    facts: dict[str, str] = {}  # the first processor's lines of /proc/cpuinfo
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            facts.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = facts.get("model name") or platform.processor() or ""
    flags = set((facts.get("flags") or facts.get("Features") or "").split())  # x86's name, Arm's
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    machine = {"hostname": platform.node(), "cpu": cpu, "cores": usable, "system": platform.platform(),
               "python": platform.python_version(), "arch": platform.machine(), "isa": vector_isa(flags)}
    machine["kind"] = machine_kind(machine)
    return machine


def profiles_dir() -> Path:
    """Where ``as2d profile`` writes and ``profile = "auto"`` looks: ``$AS2D_PROFILES_DIR``, else beside the models."""
    value = os.environ.get(ENV_PROFILES_DIR)
    return Path(value).expanduser() if value else Path.home() / ".local" / "share" / "as2d" / "profiles"


def machine_profile_file(kind: str, target: str, source: str | None) -> Path:
    """Where ``as2d profile`` writes a machine's profile of a pair by default: in :func:`profiles_dir`, named by both."""
    name = "_".join(re.sub(r"[^A-Za-z0-9.+-]+", "-", part).strip("-") for part in (kind, target, source or "alone"))
    return profiles_dir() / f"{name}.json"


def profile_path(option: str | None, target: str, source: str | None) -> str | None:
    """The file a profile option names: a path as given; None for ``"none"`` (or None); for ``"auto"`` this
    machine's newest profile of ``target`` and ``source`` in :func:`profiles_dir`, or None if it has none."""
    if option is None or option == NONE:
        return None
    if option != AUTO:
        return option
    folder = profiles_dir()
    try:
        version = folder.stat().st_mtime_ns  # a profile written since is found
    except OSError:
        return None
    return _machine_profile(str(folder), version, this_machine()["kind"], target, source)


@functools.lru_cache(maxsize=16)
def _machine_profile(folder: str, version: int, kind: str, target: str, source: str | None) -> str | None:
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = read_profile(path)
        except NotAProfile:
            continue  # another file in the folder is no profile of this machine
        if ((data.get("machine") or {}).get("kind") == kind and (data.get("target") or {}).get("model") == target
                and (data.get("source") or {}).get("name") == source):
            found.append((str(data.get("created", "")), str(path)))
    return max(found)[1] if found else None
