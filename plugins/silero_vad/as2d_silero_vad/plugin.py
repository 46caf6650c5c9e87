"""as2d hooks of the Silero VAD plugin (importing this imports neither onnxruntime nor faster-whisper)."""
from as2d_core.setup.hookspecs import DETECTOR_OPTIONS, hookimpl

from . import NAME


def _detector(options):
    from . import SileroDetector

    return SileroDetector(**{k: v for k, v in options.items() if k in DETECTOR_OPTIONS})


@hookimpl
def register_detectors(register):
    register(NAME, _detector, description="Silero VAD v6 (ONNX, shipped in faster-whisper's wheel) on ONNX Runtime",
             backends=("onnxruntime",), install="pip install ./plugins/silero_vad")
