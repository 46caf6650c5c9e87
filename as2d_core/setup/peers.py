"""The contract of an outside peer: another system that decodes the same request, measured beside as2d.

Peers (faster-whisper, transformers' assisted generation, ...) belong to the plugin of the model
they run and are offered through the ``register_peers`` hook; ``as2d bench`` knows only this
contract, so neither the core nor the benchmark imports a plugin or a model runtime.

A peer that can also transcribe a whole recording the way its users run it (its own VAD, batching
and options) implements ``FilePeer`` as well, and says so with the info ``whole_file=True`` when
it registers; ``scripts/bench_long_audio.py`` runs those.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

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
    # The peer's own clock from the audio in memory to its last token, when the call does more than that
    # (e.g. also decodes ``greedy_tokens``); None: the caller's clock around the call is the peer's time.
    e2e_s: float | None = None
    # The peer's own greedy decode of the same request, for a peer that decodes speculatively on its own
    # weights or runtime: its exactness is judged against this rather than against as2d's target.
    greedy_tokens: tuple[int, ...] | None = attrs.field(default=None, converter=attrs.converters.optional(tuple))


class Peer(Protocol):
    """Decodes 16 kHz mono audio in ``language`` (None: the peer detects it) greedily."""

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput: ...


@attrs.frozen
class FileOutput:
    """One whole recording transcribed by a peer, timed from the decoded samples in memory to the last text."""

    text: str
    wall_s: float
    segments: int  # the pieces the peer decoded (its VAD segments or windows)
    note: str  # how the peer ran (options, batching, precision)
    extra: dict = attrs.field(factory=dict)


@runtime_checkable
class FilePeer(Protocol):
    """A peer that also transcribes a whole recording of 16 kHz mono audio the way its users run it."""

    def transcribe_file(self, audio: np.ndarray, language: str | None) -> FileOutput: ...
