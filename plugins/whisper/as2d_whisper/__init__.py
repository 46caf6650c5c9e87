"""Whisper for as2d: a CTranslate2 weight reader, an ONNX converter and ORT runtimes.

The runtime (``as2d_whisper.runtime``) needs only numpy, onnxruntime and
tokenizers; conversion additionally needs torch and onnx (the ``convert`` extra).
"""
