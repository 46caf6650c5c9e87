"""The decoder graphs' audio inputs: one per layer and kind (``cross_k0``, ``cross_v0``, ``cross_k1``, ...).

The encoder writes every layer's audio K/V into one array ``[layers, 2 (k, v), heads, frames, head_dim]``.
A decoder that took that array whole sliced it per layer at every step, and ONNX Runtime copies a slice:
for whisper-base that is 36 MB a step, a third of its time. Each slice is a contiguous block of the
array, so the runtime binds the blocks in place, once per request, and no step copies them.
"""
from __future__ import annotations

import numpy as np

# A target's decoder over several windows in one call (``torch_model.decode_windows``): the single decoder's
# contract with a window axis, its cache position-major (see ``window_group``).
WINDOWS_FILE = "decoder.windows.onnx"
# Beam search's windows graph where a folder has one of its own (the int8 target's: every weight product in int8,
# ``convert.quantize``); beams read only it, so both as2d and target-only beams decode on it. Else WINDOWS_FILE.
BEAMS_FILE = "decoder.beams.onnx"
# The int8 target's windows graph for beams searched side by side (a beam wave, ``beams.WhisperBeamWave``): every
# weight product in int8, as its beams graph, where its WINDOWS_FILE keeps the layers in fp32 for verification.
BEAM_WAVE_FILE = "decoder.windows.beams.onnx"


# The beams graph's inputs besides tokens and lengths (``torch_model.decode_beams``): per layer and kind, the prompt's
# K/V every row shares, [1, heads, prompt, head_dim], and the rows' own response, [positions, rows, heads, head_dim].
PROMPT, OWN, AUDIO = "prompt", "own", "cross"


def kv_input_names(layers: int, prefix: str = AUDIO) -> list[str]:
    """A graph's K/V input names of one kind (``prefix``): layer by layer, K then V."""
    return [f"{prefix}_{kind}{layer}" for layer in range(layers) for kind in ("k", "v")]


def audio_input_names(layers: int) -> list[str]:
    """The decoder's audio input names, in the order of the encoder's array."""
    return kv_input_names(layers, AUDIO)


def kv_feed(blocks: np.ndarray, prefix: str = AUDIO) -> dict[str, np.ndarray]:
    """An array ``[layers, 2 (k, v), ...]`` as a graph's inputs ``prefix``: views of its blocks, no copies."""
    return dict(zip(kv_input_names(blocks.shape[0], prefix), blocks.reshape(-1, *blocks.shape[2:])))


def audio_feed(cross_kv: np.ndarray) -> dict[str, np.ndarray]:
    """The encoder's array as the decoder's audio inputs: views of it, no copies."""
    return kv_feed(cross_kv, AUDIO)


def windows_graph_room(model, windows: int, threads: int, graph_file: str = WINDOWS_FILE) -> tuple:
    """What a caller of a windows graph (``graph_file``) holds for ``windows`` windows (a window group, a beam
    wave): the graph's session on ``threads`` threads, its audio input names, the shape of one cache row
    ``[layers, 2, heads, head_dim]``, and room for the windows' audio K/V, per input
    ``[windows, heads, frames, head_dim]``."""
    names = audio_input_names(model.n_layers)
    frames = model.meta["dims"]["n_audio_ctx"]
    audio = [np.zeros((windows, model.n_heads, frames, model.head_dim), np.float32) for _ in names]
    row_shape = (model.n_layers, 2, model.n_heads, model.head_dim)
    return model.executor.session(graph_file, threads), names, row_shape, audio
