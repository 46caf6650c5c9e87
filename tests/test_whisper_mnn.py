"""Whisper on MNN: exactness judged on MNN itself.

as2d with the MNN target and the MNN drafter equals target-only greedy decoding
on MNN (budgets 1 and 7), batched verification equals single steps and
truncation repairs the cache exactly. How MNN's greedy tokens compare with ONNX
Runtime's is recorded (``record_property`` and printed with ``-s``), not asserted:
two runtimes may round a near-tie differently.

These tests need MNN and the MNN graphs beside the ONNX ones
(``python -m as2d_whisper.convert --mnn whisper-base whisper-tiny.en``); they
fail, never skip, when either is missing.
"""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from as2d_core.contracts import Request, Target, TargetSession
from as2d_core.decode.request import run_request
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.paths import models_dir
from as2d_core.setup.catalog import resolve_bridge

from conftest import HAVE_SHARED, speech_audio
from drafting import PacedTarget, options_that_draft

MNN_INSTALL = "python -m as2d_whisper.convert --mnn whisper-base whisper-tiny.en"
# two windows of the repository's speech set, and one of the shared set where it is present
WINDOWS = ("librivox_sense_en_w01", "cmu_cards_en_w00") + (("fleurs_en_w02",) if HAVE_SHARED else ())


def _mnn_part(kind: str):
    if importlib.util.find_spec("MNN") is None:
        pytest.fail("MNN is not installed: `pip install ./plugins/mnn` (brings the MNN wheel)")
    from as2d_whisper.drafter import WhisperSource
    from as2d_whisper.target import WhisperTarget

    try:
        if kind == "target":
            return WhisperTarget(models_dir() / "whisper-base", backend="mnn", audio_cache=4, preload_threads=(1, 2))
        return WhisperSource(models_dir() / "whisper-tiny.en", backend="mnn", audio_cache=4, preload_threads=(1,))
    except FileNotFoundError as exc:
        pytest.fail(f"{exc}; run `{MNN_INSTALL}`")


@pytest.fixture(scope="module")
def mnn_target():
    return _mnn_part("target")


@pytest.fixture(scope="module")
def mnn_source():
    return _mnn_part("source")


@pytest.fixture(scope="module")
def mnn_greedy(mnn_target):
    """Target-only greedy tokens on MNN per window, through the engine (the as2d reference)."""
    out = {}
    for item_id in WINDOWS:
        request = Request(item_id, speech_audio(item_id), language="en")
        out[item_id] = run_request(request, mnn_target, None, "target-only", DecodeOptions()).tokens
    return out


def test_protocols_and_device(mnn_target, mnn_source):
    session = mnn_target.prepare(Request("p", speech_audio("cmu_cards_en_w00"), language="en"), threads=1)
    try:
        assert isinstance(mnn_target, Target) and isinstance(session, TargetSession)
        assert mnn_target.backend == "mnn" and session.eos_token == 50257
        assert session.max_new_tokens == 448 // 2 and session.cache_length == 0  # CTranslate2's bound (response_room)
        assert mnn_target.device_in_use == ["MNN:CPU"] and session.device_in_use == ["MNN:CPU"]
        assert mnn_source.device_in_use == ["MNN:CPU"]
    finally:
        session.close()


def test_opencl_refused_with_probe_reason(mnn_target):
    from as2d_mnn import probe

    from as2d_whisper.target import WhisperTarget

    reason = probe()["opencl"]
    if reason is None:  # an MNN built with OpenCL on a machine with a driver
        assert WhisperTarget(mnn_target.model.dir, backend="mnn", backend_device="opencl").device == "opencl"
    else:
        with pytest.raises(RuntimeError, match="opencl") as exc:
            WhisperTarget(mnn_target.model.dir, backend="mnn", backend_device="opencl")
        assert reason in str(exc.value)


def test_plugin_factory_passes_backend(mnn_target):
    from as2d_core.setup.plugins import load_registry

    part = load_registry().get("target", "whisper-base")
    target = part.factory({"models_dir": models_dir(), "backend": "mnn", "preload_threads": ()})
    assert target.backend == "mnn" and target.device_in_use == ["MNN:CPU"]


@pytest.mark.parametrize("budget", [1, 7])
@pytest.mark.parametrize("item_id", WINDOWS)
def test_as2d_equals_target_only_on_mnn(mnn_target, mnn_source, mnn_greedy, item_id, budget):
    request = Request(item_id, speech_audio(item_id), language="en")
    result = run_request(request, mnn_target, mnn_source, "as2d", DecodeOptions(budget=budget),
                         bridge=resolve_bridge(mnn_source, mnn_target))
    assert result.tokens == mnn_greedy[item_id], (
        f"{item_id} budget {budget}: as2d {mnn_target.model.decode_text(result.tokens)!r} vs target-only "
        f"{mnn_target.model.decode_text(mnn_greedy[item_id])!r}")
    assert len(result.tokens) > 5


@pytest.mark.parametrize("source_backend", ["mnn", "onnxruntime"])
def test_as2d_with_drafter_process_on_mnn(mnn_target, mnn_greedy, source_backend):
    """The drafter in its own process (MNN keeps the GIL while it computes): still exact, and it drafts."""
    from as2d_core.setup.build import build_source

    source = build_source("whisper-tiny.en+process", backend=source_backend)
    published = []
    try:
        for item_id in WINDOWS[:2]:
            request = Request(item_id, speech_audio(item_id), language="en")
            # prepared start: the shared target reuses its audio K/V, so no encoder runs beside an arrival start;
            # the paced target leaves the child time to publish even when other work takes both cores
            result = run_request(request, PacedTarget(mnn_target), source, "as2d", options_that_draft(start="prepared"),
                                 bridge=resolve_bridge(source, mnn_target))
            assert result.tokens == mnn_greedy[item_id] and result.producer_error is None
            published.append(result.published)
        # the child drafted for real; one window's count is left to timing (a busy run once saw 0 on a short window)
        assert sum(published) > 0, published
    finally:
        source.close()


def test_batched_verify_and_truncate_on_mnn(mnn_target):
    from test_whisper_target import check_batched_verify_and_truncate

    check_batched_verify_and_truncate(mnn_target, speech_audio("librivox_sense_en_w01"))


def test_mnn_versus_onnxruntime_recorded(mnn_target, mnn_greedy, whisper_target, record_property):
    """Record (never assert) whether MNN's greedy tokens equal ONNX Runtime's."""
    report = {}
    for item_id in WINDOWS:
        request = Request(item_id, speech_audio(item_id), language="en")
        ort_tokens = run_request(request, whisper_target, None, "target-only", DecodeOptions()).tokens
        ours = mnn_greedy[item_id]
        first_diff = next((i for i, (a, b) in enumerate(zip(ours, ort_tokens)) if a != b),
                          None if len(ours) == len(ort_tokens) else min(len(ours), len(ort_tokens)))
        report[item_id] = {"equal": ours == ort_tokens, "mnn_tokens": len(ours), "ort_tokens": len(ort_tokens),
                           "first_difference": first_diff}
        if ours != ort_tokens:
            report[item_id]["mnn_text"] = mnn_target.model.decode_text(ours)
            report[item_id]["ort_text"] = whisper_target.model.decode_text(ort_tokens)
    record_property("mnn_vs_onnxruntime", json.dumps(report))
    print("MNN vs ONNX Runtime greedy tokens:", json.dumps(report, ensure_ascii=False))


def test_missing_mnn_graphs_name_the_mnn_step(tmp_path):
    from as2d_whisper.target import WhisperTarget

    installed = models_dir() / "whisper-base"
    for name in ("model.json", "tokenizer.json", "encoder.onnx", "decoder.onnx"):
        (tmp_path / name).symlink_to(installed / name)
    with pytest.raises(FileNotFoundError, match="as2d_whisper.convert --mnn") as exc:
        WhisperTarget(tmp_path, backend="mnn")
    assert "encoder.mnn" in str(exc.value) and "decoder.mnn" in str(exc.value)
