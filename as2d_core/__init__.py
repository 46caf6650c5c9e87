"""as2d: audio-conditioned speculative decoding with target-decoupled drafting.

The public contracts live in ``contracts``; the engine in ``engine``; plugins
register parts through ``hookspecs``.
"""
from as2d_core.input.audio import AudioError, load_audio
from as2d_core.decode.buffer import CandidateBuffer, Snapshot
from as2d_core.contracts import DraftJob, DraftPiece, PublishedBatch, Request, Source, Target, TargetSession
from as2d_core.decode import DecodeResult, run_request
from as2d_core.setup.options import DecodeOptions
from as2d_core.setup.hookspecs import hookimpl

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
