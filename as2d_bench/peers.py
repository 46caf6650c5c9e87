"""Outside peers in a benchmark: whatever the plugins offer through ``register_peers``, as result rows.

The benchmark knows only the contract in ``as2d_core.setup.peers``; a peer that cannot load or run gives
a row whose ``error`` says why, so the benchmark still completes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from as2d_core.setup.paths import models_dir
from as2d_core.setup.peers import Peer, PeerUnavailable
from as2d_core.setup.plugins import load_registry


def peer_methods() -> list[str]:
    """Every peer the installed plugins offer."""
    return load_registry().names("peer")


def default_peers() -> list[str]:
    """The peers a plugin asks to run when ``--methods`` is not given."""
    registry = load_registry()
    return [name for name in registry.names("peer") if registry.get("peer", name).info.get("default")]


def make_peers(methods: list[str], threads: int, root: Path | None = None) -> dict[str, Peer]:
    """The peers among ``methods``, built; one that cannot load reports why on every row."""
    registry = load_registry()
    peers = {}
    for method in methods:
        part = registry.find("peer", method)
        if part is None:
            continue
        try:
            peers[method] = part.factory({"threads": threads, "models_dir": root or models_dir()})
        except Exception as exc:
            peers[method] = _unavailable(f"{type(exc).__name__}: {exc}")
    return peers


def peer_row(window, method: str, peer: Peer, audio: np.ndarray, reference, detect_language: bool = False) -> dict:
    """Run one peer on one window and compare it with the target-only reference (when there is one).

    ``exact``: equal to the peer's own greedy output when it gives one (a speculative peer on its own
    runtime), else to target-only's tokens; ``exact_against`` says which, ``equals_target`` is the latter.
    ``detect_language``: the peer detects the language itself, as the target does in such a run.
    """
    language = None if detect_language else window.lang or (reference.language if reference is not None else None)
    out = peer(audio, language)
    equals_target = list(out.tokens) == list(reference.tokens) if reference is not None else None
    own = out.greedy_tokens is not None
    timing = {"e2e_s": out.e2e_s} if out.e2e_s is not None else {}
    return {
        "window": window.id, "lang": window.lang, "method": method, "tokens": len(out.tokens),
        "decode_s": out.decode_s, "tps": len(out.tokens) / out.decode_s if out.decode_s > 0 else 0.0,
        "exact": list(out.tokens) == list(out.greedy_tokens) if own else equals_target,
        "exact_against": "own greedy" if own else "target-only", "equals_target": equals_target,
        "text_equal": (out.text.strip() == reference.text.strip()) if reference is not None else None,
        "proposed": 0, "accepted": 0, "verify_calls": out.verify_calls, "verify_widths": [], "target_only_steps": 0,
        "text": out.text, "note": out.note, **timing, **out.extra,
    }


def _unavailable(reason: str) -> Peer:
    def run(audio, language):
        raise PeerUnavailable(f"could not run: {reason}")

    return run
