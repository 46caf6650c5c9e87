"""Whisper for as2d: a CTranslate2 weight reader, an ONNX converter and ORT runtimes.

The target (``target``) and drafters (``drafter``, ``ct2_drafter``), on the executors (``executors``) of a
loaded folder (``model_files``, ``vocabulary``), need only numpy, onnxruntime and tokenizers; conversion
additionally needs torch and onnx (the ``convert`` extra).
"""
