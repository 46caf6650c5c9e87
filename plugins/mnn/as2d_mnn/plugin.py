"""as2d hooks of the MNN backend (importing this never imports MNN)."""
from as2d_core.setup.hookspecs import hookimpl

from . import DEVICES, probe


@hookimpl
def register_backends(register):
    register(
        "mnn",
        probe,
        description="MNN and its LLM engine (device availability probed from the installed build)",
        devices=DEVICES,
        notes={"opencl": "the PyPI MNN wheel is CPU-only: asking for OpenCL prints a line and silently runs on CPU; "
                         "build MNN with MNN_OPENCL=ON"},
        install="pip install ./plugins/mnn",
    )
