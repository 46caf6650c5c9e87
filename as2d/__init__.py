"""as2d with faster-whisper's Python interface: ``from as2d import WhisperModel``.

Code written for faster-whisper runs with only its import changed; the segments are the target's own
greedy output, decoded with as2d's drafter (``as2d.transcribe``). The engine, the pipeline and the
contracts are in ``as2d_core``.
"""
from .batched import BatchedInferencePipeline
from .transcribe import (Segment, TranscriptionInfo, TranscriptionOptions, VadOptions, WhisperModel, Word,
                         available_models, decode_audio, format_timestamp)

__all__ = [
    "BatchedInferencePipeline",
    "Segment",
    "TranscriptionInfo",
    "TranscriptionOptions",
    "VadOptions",
    "WhisperModel",
    "Word",
    "available_models",
    "decode_audio",
    "format_timestamp",
]
