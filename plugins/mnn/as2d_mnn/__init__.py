"""MNN backend for as2d.

MNN's PyPI wheel is CPU-only: asking it for OpenCL prints a line and runs on CPU.
So OpenCL is only reported as running when this MNN ships its OpenCL backend
library and the machine has an OpenCL driver to load.
"""
from __future__ import annotations

import ctypes.util
from pathlib import Path

from as2d_core.workers.native import import_quietly

DEVICES = ("cpu", "opencl")
INSTALL = "pip install MNN (CPU only; OpenCL needs an MNN built with MNN_OPENCL=ON)"


def _has_opencl_backend(package_dir: Path) -> bool:
    return any(package_dir.rglob("*MNN_CL*"))


def probe() -> dict[str, str | None]:
    """``{device: None if it really runs here, else why not}``."""
    try:
        MNN = import_quietly("MNN")  # its import prints a CPU-feature banner on stdout
    except ImportError:
        return {device: f"MNN is not installed: {INSTALL}" for device in DEVICES}
    result: dict[str, str | None] = {"cpu": None}
    package_dir = Path(MNN.__file__).parent
    if not _has_opencl_backend(package_dir):
        result["opencl"] = (
            f"this MNN build ({package_dir}) has no OpenCL backend (the PyPI wheel is CPU-only and "
            "would silently run on CPU); build MNN with MNN_OPENCL=ON"
        )
    elif ctypes.util.find_library("OpenCL") is None:
        result["opencl"] = "no OpenCL driver (libOpenCL) on this machine"
    else:
        result["opencl"] = None
    return result
