"""The qwen3_asr plugin on tiny random-weight Qwen3-ASR checkpoints (tests/fixtures, rebuilt by
tests/build_tiny_qwen3_asr.py), on torch: loading through the plugin, all-position logits equal to the
thinker's one-shot forward, cache repair, and as2d equal to target-only. MNN 3.6.1 cannot run the audio
encoder; that is detected and checked here too.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qwen_asr")
torch = pytest.importorskip("torch")

from as2d_core.decode.options import DecodeOptions  # noqa: E402
from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.contracts import Source, Target, TargetSession  # noqa: E402
from as2d_core.setup.catalog import resolve_bridge  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    from as2d_qwen3_asr.plugin import _source, _target

    root = tmp_path_factory.mktemp("models")
    (root / "qwen3-asr-1.7b").symlink_to(FIXTURES / "tiny-qwen3-asr-1.7b")
    (root / "qwen3-asr-0.6b").symlink_to(FIXTURES / "tiny-qwen3-asr-0.6b")
    options = {"models_dir": root, "backend": "torch", "device": "cpu", "max_new_tokens": 20, "dtype": "float64"}
    return _target(options), _source(options)


def speech(seed: int, seconds: float = 1.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + rng.normal(0, 0.05, t.size)).astype(np.float32)


def test_protocols_and_prompt(parts):
    target, source = parts
    assert isinstance(target, Target) and isinstance(source, Source)
    assert target.vocabulary == source.vocabulary == "qwen3-asr"
    assert target.prompt("en").endswith("<|im_start|>assistant\nlanguage English<asr_text>")
    assert "<|audio_start|><|audio_pad|><|audio_end|>" in target.prompt(None)
    session = target.prepare(Request("p", speech(0), language="en"), threads=1)
    try:
        assert isinstance(session, TargetSession) and session.cache_length == 0
    finally:
        session.close()


def test_all_position_logits_equal_one_shot_forward(parts):
    target, _ = parts
    request = Request("l", speech(1), language="en")
    session = target.prepare(request, threads=1)
    tokens = [session.first_token(), 30, 31, 32, 33]
    got = session.verify(tokens[0], tokens[1:])
    session.close()
    inputs = target.processor(text=[target.prompt("en")], audio=[request.audio], return_tensors="pt")
    inputs["input_features"] = inputs["input_features"].to(target.model.dtype)
    ids = torch.cat([inputs["input_ids"], torch.tensor([tokens])], dim=1)
    with torch.no_grad():
        ref = target.thinker(input_ids=ids, input_features=inputs["input_features"],
                             feature_attention_mask=inputs["feature_attention_mask"],
                             attention_mask=torch.ones_like(ids)).logits[0, -len(tokens):]
    assert got == ref.argmax(-1).tolist()


def test_cache_repair_after_partial_and_full_rejection(parts):
    target, _ = parts
    request = Request("r", speech(2), language="en")
    session = target.prepare(request, threads=1)
    root = session.first_token()
    wide = session.verify(root, [11, 12, 13, 14])
    session.truncate(2)
    after_partial = session.verify(wide[1], [])
    session.truncate(1)
    after_full = session.verify(wide[0], [21, 22])
    session.close()
    fresh = target.prepare(request, threads=1)
    assert fresh.verify(root, [11, wide[1]]) == [wide[0], wide[1], after_partial[0]]
    fresh.close()
    fresh = target.prepare(request, threads=1)
    assert fresh.verify(root, [wide[0], 21, 22])[1:] == after_full
    fresh.close()


@pytest.mark.parametrize("language", ["en", None])
def test_as2d_equals_target_only(parts, language):
    target, source = parts
    for seed in range(2):
        request = Request(f"a-{seed}", speech(seed + 3), language=language)
        ref = run_request(request, target, None, "target-only")
        result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=1),
                             bridge=resolve_bridge(source, target))
        assert result.tokens == ref.tokens and result.text == ref.text
        assert result.producer_error is None


def test_drafter_agrees_in_part(parts):
    """Acceptance during a run depends on timing (the target never waits); compare the greedy outputs instead."""
    target, source = parts
    same = total = 0
    for seed in range(4):
        request = Request(f"d-{seed}", speech(seed), language=None)
        ref = run_request(request, target, None, "target-only").tokens
        job = source.prepare(request, "auto", 1)
        drafted = [piece.tokens[0] for piece in job.pieces()]
        job.close()
        same, total = same + sum(a == b for a, b in zip(ref, drafted)), total + len(ref)
    assert 0 < same < total


def test_missing_files_are_named(tmp_path):
    from as2d_core.setup.paths import ModelFilesMissing
    from as2d_qwen3_asr.plugin import _target

    (tmp_path / "qwen3-asr-1.7b").mkdir()
    (tmp_path / "qwen3-asr-1.7b" / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissing, match="lacks model.safetensors, tokenizer.json.*expected layout: the Hugging Face"):
        _target({"models_dir": tmp_path})


def test_mnn_backend_is_detected_as_unsupported():
    pytest.importorskip("MNN")
    from as2d_mnn.llm import mnn_version, qwen3_asr_audio_reason
    from as2d_qwen3_asr.plugin import _target

    if mnn_version() <= (3, 6, 1):
        assert "cannot run Qwen3-ASR's audio encoder" in qwen3_asr_audio_reason()
        with pytest.raises(RuntimeError, match="Padding blob size not match"):
            _target({"models_dir": FIXTURES, "backend": "mnn"})
