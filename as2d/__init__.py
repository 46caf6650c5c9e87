"""as2d with faster-whisper's Python interface: ``from as2d import WhisperModel``.

Code written for faster-whisper runs with only its import changed; the segments are the target's own
output in the same decoding mode, decoded with as2d's drafter (``as2d.transcribe``). The engine, the
pipeline and the contracts are in ``as2d_core``.
"""
from .batched import BatchedInferencePipeline
from .audio import decode_audio
from .models import available_models, download_model
from .objects import Segment, TranscriptionInfo, TranscriptionOptions, VadOptions, Word, format_timestamp
from .transcribe import WhisperModel
from .version import __version__

__all__ = [
    "BatchedInferencePipeline",
    "Segment",
    "TranscriptionInfo",
    "TranscriptionOptions",
    "VadOptions",
    "WhisperModel",
    "Word",
    "__version__",
    "available_models",
    "decode_audio",
    "download_model",
    "format_timestamp",
]
