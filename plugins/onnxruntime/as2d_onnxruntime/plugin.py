"""as2d hooks of the ONNX Runtime backend (importing this never imports onnxruntime)."""
from as2d_core.setup.hookspecs import hookimpl

from . import DEVICES, probe


@hookimpl
def register_backends(register):
    register(
        "onnxruntime",
        probe,
        description="ONNX Runtime (device availability probed from its execution providers)",
        devices=DEVICES,
        notes={"nnapi": "only Android builds of onnxruntime have the NNAPI provider; the Linux wheel silently falls back to CPU"},
        install="pip install ./plugins/onnxruntime",
    )
