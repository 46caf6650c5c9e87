"""The contract of an outside peer: another system that decodes the same request, measured beside as2d.

Peers (faster-whisper, transformers' assisted generation, ...) belong to the plugin of the model
they run and are offered through the ``register_peers`` hook; ``as2d bench`` knows only this
contract, so neither the core nor the benchmark imports a plugin or a model runtime.
"""
from __future__ import annotations

from typing import Protocol

import attrs
import numpy as np


class PeerUnavailable(RuntimeError):
    """The peer cannot decode this request (not installed, language not served, ...); the message says why."""


@attrs.frozen
class PeerOutput:
    """What one peer decode produced, timed on the decode clock (encoders before it, as for as2d)."""

    tokens: tuple[int, ...] = attrs.field(converter=tuple)
    text: str
    decode_s: float
    note: str  # what the clock holds and how the peer ran
    verify_calls: int = 0  # target calls, for peers that verify drafts
    extra: dict = attrs.field(factory=dict)  # further facts for the result row (e.g. library versions)


class Peer(Protocol):
    """Decodes 16 kHz mono audio in ``language`` (None: the peer detects it) greedily."""

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput: ...
