"""Reading a device profile (``as2d profile``'s file): the one loader of every command that takes ``--profile``.

``as2d run`` prices ``batch_windows = "auto"`` from it (``scheduler.wave_prices``), ``as2d serve`` its
``--speculate-rows`` (``scheduler.speculate_rows_from``), and the tuning commands (``as2d replay``, ``as2d
select``) their costs; each checks here that the file is a profile, then reads the sections it needs.
"""
from __future__ import annotations

import functools
import json
import os
import tomllib
from pathlib import Path

FORMAT = "as2d-profile/1"


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
