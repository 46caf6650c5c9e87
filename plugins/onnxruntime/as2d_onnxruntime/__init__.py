"""ONNX Runtime backend for as2d.

ONNX Runtime quietly drops execution providers it does not have (the Linux
wheel has no NNAPI provider and runs such a session on CPU), so a device is only
reported as running when its provider is in ``get_available_providers()``, and
``providers_for`` refuses instead of falling back.
"""
from __future__ import annotations

DEVICES = ("cpu", "nnapi")
PROVIDERS = {"cpu": "CPUExecutionProvider", "nnapi": "NnapiExecutionProvider"}
INSTALL = "pip install onnxruntime (NNAPI: an Android build of onnxruntime)"


def probe() -> dict[str, str | None]:
    """``{device: None if it really runs here, else why not}``."""
    try:
        import onnxruntime
    except ImportError:
        return {device: f"onnxruntime is not installed: {INSTALL}" for device in DEVICES}
    available = onnxruntime.get_available_providers()
    result: dict[str, str | None] = {}
    for device, provider in PROVIDERS.items():
        if provider in available:
            result[device] = None
        else:
            result[device] = (
                f"this onnxruntime {onnxruntime.__version__} build has no {provider} "
                f"(it has {', '.join(available)}); asking for it would silently run on CPU"
            )
    return result


def providers_for(device: str) -> list[str]:
    """The provider list for an ``InferenceSession`` on ``device``; raises rather than fall back to CPU."""
    if device not in PROVIDERS:
        raise ValueError(f"unknown onnxruntime device {device!r}; choose one of {', '.join(DEVICES)}")
    why = probe()[device]
    if why is not None:
        raise RuntimeError(f"device {device!r} does not run here: {why}")
    return [PROVIDERS[device]] if device == "cpu" else [PROVIDERS[device], PROVIDERS["cpu"]]
