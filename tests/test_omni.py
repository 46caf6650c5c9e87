"""The omni plugin on tiny random-weight Qwen2.5-Omni exports (tests/fixtures, rebuilt by tests/build_tiny_omni.py).

Loading goes through the plugin's own factories; logits are checked against the
HF thinker, cache repair against fresh prefill, and as2d against target-only on MNN.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("MNN")  # the MNN backend is this plugin's only runtime

from as2d_core import DecodeOptions, Request, run_request  # noqa: E402
from as2d_core.contracts import Source, Target, TargetSession  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    """A models folder with the paper's folder names pointing at the tiny exports."""
    root = tmp_path_factory.mktemp("models")
    (root / "qwen2.5-omni-7b").symlink_to(FIXTURES / "tiny-omni-7b")
    (root / "qwen2.5-omni-3b").symlink_to(FIXTURES / "tiny-omni-3b")
    return root


@pytest.fixture(scope="module")
def parts(models_dir):
    from as2d_omni.plugin import _source, _target

    options = {"models_dir": models_dir, "device": "cpu", "threads": 1, "max_new_tokens": 24}
    return _target(options), _source(options)


def speech(seed: int, seconds: float = 1.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + rng.normal(0, 0.05, t.size)).astype(np.float32)


def test_protocols_and_audio_prefill(parts):
    target, source = parts
    assert isinstance(target, Target) and isinstance(source, Source)
    assert target.vocabulary == source.vocabulary == "qwen2.5-omni"
    assert target.device_in_use == "cpu"
    ids = target.engine.prompt_ids("<|im_start|>user\n{audio}Hi<|im_end|>\n", speech(0))
    pad = target.engine.encode("<|AUDIO|>")[-1]
    assert ids.count(pad) > 5  # the engine's audio encoder filled the pad positions
    session = target.prepare(Request("p", speech(0), language="en"), threads=1)
    try:
        assert isinstance(session, TargetSession) and session.cache_length == 0
    finally:
        session.close()


def test_all_position_logits_match_hf_thinker(parts):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    target, _ = parts
    hf = transformers.Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(
        FIXTURES / "tiny-omni-7b-hf", torch_dtype=torch.float32).eval()
    ids = target.engine.encode("<|im_start|>user\nThe cat sat on a mat and it was fine.<|im_end|>\n<|im_start|>assistant\n")
    state, logits = target.engine.start(ids, 1)
    state.close()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0].numpy()
    assert logits.shape == ref.shape
    assert (logits.argmax(-1) == ref.argmax(-1)).mean() >= 0.9  # bf16 embeddings in the export
    assert np.abs(logits - ref).max() < 0.1 * np.abs(ref).max()


def test_cache_repair_after_partial_and_full_rejection(parts):
    target, _ = parts
    request = Request("r", speech(1), language="en")
    session = target.prepare(request, threads=1)
    try:
        root = session.first_token()
        wide = session.verify(root, [11, 12, 13, 14])
        session.truncate(2)  # keep root + one candidate (partial acceptance)
        after_partial = session.verify(wide[1], [])
        session.truncate(1)  # drop everything after the root (full rejection of the next call)
        after_full = session.verify(wide[0], [21, 22])
    finally:
        session.close()
    fresh = target.prepare(request, threads=1)
    try:
        first = fresh.verify(root, [])
        assert first[0] == wide[0]
        assert fresh.verify(11, [wide[1]]) == [wide[1], after_partial[0]]
    finally:
        fresh.close()
    fresh = target.prepare(request, threads=1)
    try:
        assert fresh.verify(root, [wide[0], 21, 22])[1:] == after_full
    finally:
        fresh.close()


@pytest.mark.parametrize("task,instruction", [("asr", None), ("translate", None), ("qa", "What is the tone?")])
def test_as2d_equals_target_only(parts, task, instruction):
    target, source = parts
    for seed in range(2):
        request = Request(f"{task}-{seed}", speech(seed + 2), language="en", task=task, instruction=instruction)
        ref = run_request(request, target, None, "target-only")
        result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=2))
        assert result.tokens == ref.tokens and result.text == ref.text
        assert result.producer_error is None
        assert len(ref.tokens) == 24


def test_drafter_is_useful_and_wrong_sometimes(parts):
    """Acceptance during a run depends on timing (the target never waits); compare the greedy outputs instead."""
    target, source = parts
    request = Request("mix", speech(0), language="en")
    ref = run_request(request, target, None, "target-only").tokens
    job = source.prepare(request, "en", 1)
    drafted = [piece.tokens[0] for piece in job.pieces()]
    job.close()
    same = sum(a == b for a, b in zip(ref, drafted))
    assert 0 < same < len(ref)


def test_missing_files_are_named(tmp_path):
    from as2d_mnn.lm import ModelFilesMissing
    from as2d_omni.plugin import _target

    folder = tmp_path / "qwen2.5-omni-7b"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissing, match=r"lacks llm_config.json, llm.mnn, llm.mnn.weight, tokenizer.mtok, audio.mnn"):
        _target({"models_dir": tmp_path})
    with pytest.raises(ModelFilesMissing, match="does not exist; expected a folder exported by MNN's llmexport"):
        _target({"models_dir": tmp_path / "nowhere"})


def test_qa_without_question_is_refused(parts):
    target, _ = parts
    with pytest.raises(ValueError, match="needs the question"):
        target.prepare(Request("q", speech(0), task="qa"), threads=1)
