"""as2d: audio-conditioned speculative decoding with target-decoupled drafting.

The public contracts live in ``contracts``; the engine in ``engine``; plugins
register parts through ``hookspecs``.
"""
from .audio import AudioError, load_audio
from .buffer import CandidateBuffer, Snapshot
from .contracts import DraftJob, DraftPiece, PublishedBatch, Request, Source, Target, TargetSession
from .engine import DecodeOptions, DecodeResult, run_request
from .hookspecs import hookimpl

__all__ = [
    "AudioError",
    "CandidateBuffer",
    "DecodeOptions",
    "DecodeResult",
    "DraftJob",
    "DraftPiece",
    "PublishedBatch",
    "Request",
    "Snapshot",
    "Source",
    "Target",
    "TargetSession",
    "hookimpl",
    "load_audio",
    "run_request",
]
