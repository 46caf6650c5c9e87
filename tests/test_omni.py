"""The omni plugin on tiny random-weight Qwen2.5-Omni models (tests/fixtures, rebuilt by tests/build_tiny_omni.py).

Both backends load through the plugin's own factories: MNN from the llmexport
folders, torch from the Hugging Face checkpoint folders. Logits are checked
against the HF thinker, cache repair against fresh prefill, as2d against
target-only, and the target's output against another audio (the fixtures
really listen). MNN tests skip without MNN, torch tests without torch.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.contracts import Source, Target, TargetSession
from as2d_core.setup.catalog import resolve_bridge

FIXTURES = Path(__file__).parent / "fixtures"
HAS_MNN = importlib.util.find_spec("MNN") is not None
HAS_TORCH = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
needs_mnn = pytest.mark.skipif(not HAS_MNN, reason="MNN is not installed")
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch or transformers is not installed")
FOLDERS = {"mnn": ("tiny-omni-7b", "tiny-omni-3b"), "torch": ("tiny-omni-7b-hf", "tiny-omni-3b-hf")}
MARKS = {"mnn": needs_mnn, "torch": needs_torch}
BACKENDS = [pytest.param(name, marks=MARKS[name]) for name in FOLDERS]


def load(backend: str, root: Path):
    """Target and source through the plugin, from a models dir whose paper folder names point at the fixtures."""
    from as2d_omni.plugin import _source, _target

    for name, fixture in zip(("qwen2.5-omni-7b", "qwen2.5-omni-3b"), FOLDERS[backend]):
        (root / name).symlink_to(FIXTURES / fixture)
    options = {"models_dir": root, "backend": backend, "device": "cpu", "threads": 1, "max_new_tokens": 24}
    return _target(options), _source(options)


@pytest.fixture(scope="module")
def mnn_parts(tmp_path_factory):
    return load("mnn", tmp_path_factory.mktemp("models-mnn"))


@pytest.fixture(scope="module")
def torch_parts(tmp_path_factory):
    return load("torch", tmp_path_factory.mktemp("models-torch"))


@pytest.fixture(params=BACKENDS)
def parts(request):
    return request.getfixturevalue(f"{request.param}_parts")


def speech(seed: int, seconds: float = 1.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + rng.normal(0, 0.05, t.size)).astype(np.float32)


def audio_pads(target, request: Request) -> int:
    """How many ``<|AUDIO|>`` positions the backend's prompt holds for ``request``."""
    from as2d_omni.model import messages, prompt_text

    engine = target.engine
    pad = engine.encode("<|AUDIO|>")[-1]
    if target.backend == "mnn":
        ids = engine.prompt_ids(prompt_text(request, "zh"), request.audio)
    else:
        ids = engine.inputs(engine.prompt(messages(request, "zh")), request.audio)["input_ids"][0].tolist()
    return ids.count(pad)


def test_protocols_and_audio_prefill(parts):
    target, source = parts
    assert isinstance(target, Target) and isinstance(source, Source)
    assert target.vocabulary == source.vocabulary == "qwen2.5-omni"
    assert target.device_in_use == source.device_in_use == (["MNN:CPU"] if target.backend == "mnn" else ["torch:CPU"])
    assert audio_pads(target, Request("p", speech(0))) > 5  # the audio encoder's frames fill the pad positions
    session = target.prepare(Request("p", speech(0), language="en"), threads=1)
    try:
        assert isinstance(session, TargetSession) and session.cache_length == 0
    finally:
        session.close()


@needs_torch
@pytest.mark.parametrize("task,question", [("asr", None), ("translate", None), ("qa", "What is the tone?")])
def test_torch_prompt_is_the_mnn_prompt(torch_parts, task, question):
    """The checkpoint's chat template over ``messages`` gives the text MNN is given."""
    from as2d_omni.model import messages, prompt_text

    target, _ = torch_parts
    request = Request("t", speech(0), language="en", task=task, instruction=question)
    written = prompt_text(request, "zh").replace("{audio}", "<|audio_bos|><|AUDIO|><|audio_eos|>")
    assert target.engine.prompt(messages(request, "zh")) == written


@needs_mnn
def test_mnn_logits_match_hf_thinker(mnn_parts):
    import torch
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    target, _ = mnn_parts
    hf = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(FIXTURES / "tiny-omni-7b-hf",
                                                                   dtype=torch.float32).eval()
    ids = target.engine.encode("<|im_start|>user\nThe cat sat on a mat and it was fine.<|im_end|>\n<|im_start|>assistant\n")
    state, logits = target.engine.start(ids, 1)
    state.close()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0].numpy()
    assert logits.shape == ref.shape
    assert (logits.argmax(-1) == ref.argmax(-1)).mean() >= 0.9  # bf16 embeddings in the export
    assert np.abs(logits - ref).max() < 0.1 * np.abs(ref).max()


@needs_torch
def test_torch_logits_match_a_full_forward_at_every_position(torch_parts):
    """Prefill with explicit mRoPE positions, then appends on the cache, equal one uncached forward of the HF thinker."""
    import torch
    from as2d_omni.model import messages
    from transformers import Qwen2_5OmniThinkerForConditionalGeneration

    target, _ = torch_parts
    engine = target.engine
    chat = messages(Request("l", speech(4), language="en", task="translate"), "zh")
    tokens = [11, 12, 13, 14, 15]
    state, prompt_logits = engine.start(chat, speech(4), 1)
    try:
        got = np.concatenate([prompt_logits, state.append(tokens[:1]), state.append(tokens[1:])])
    finally:
        state.close()
    hf = Qwen2_5OmniThinkerForConditionalGeneration.from_pretrained(FIXTURES / "tiny-omni-7b-hf",
                                                                   dtype=torch.float32).eval()
    inputs = engine.inputs(engine.prompt(chat), speech(4))
    ids = torch.cat([inputs["input_ids"], torch.tensor([tokens])], dim=1)
    with torch.no_grad():
        ref = hf(**dict(inputs, input_ids=ids, attention_mask=torch.ones_like(ids))).logits[0].double().numpy()
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() < 1e-5 * np.abs(ref).max()
    assert engine.model.rope_deltas is None  # positions were always passed: nothing stored on the shared model


@needs_torch
def test_torch_state_continues_at_the_request_rope_delta():
    """Appends sit at ``cache position + rope delta`` on all three axes, with the cache position itself."""
    import torch
    from as2d_lm.torch_lm import TorchLMState

    seen = []

    def model(**kwargs):
        seen.append(kwargs)
        return type("Out", (), {"logits": torch.zeros(1, kwargs["input_ids"].shape[1], 4)})()

    state = TorchLMState(model)
    state.prefill({"input_ids": torch.zeros(1, 6, dtype=torch.long)}, rope_delta=-2)
    state.append([1, 2])
    state.truncate(7)
    state.append([3])
    assert seen[1]["position_ids"].tolist() == [[[4, 5]]] * 3 and seen[1]["cache_position"].tolist() == [6, 7]
    assert seen[2]["position_ids"].tolist() == [[[5]]] * 3 and seen[2]["cache_position"].tolist() == [7]


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


@needs_torch
def test_torch_sessions_on_one_model_do_not_interfere(torch_parts):
    """Two requests interleaved on the same loaded target decode as they do alone."""
    target, _ = torch_parts
    requests = [Request(f"i{seed}", speech(seed), language="en") for seed in (0, 1)]
    alone = [run_request(r, target, None, "target-only").tokens for r in requests]
    sessions = [target.prepare(r, threads=1) for r in requests]
    try:
        outputs = [[s.first_token()] for s in sessions]
        for _ in range(5):
            for session, out in zip(sessions, outputs):
                out.append(session.verify(out[-1], [])[0])
    finally:
        for session in sessions:
            session.close()
    assert [out[:6] for out in outputs] == [a[:6] for a in alone]


@pytest.mark.parametrize("task,instruction", [("asr", None), ("translate", None), ("qa", "What is the tone?")])
def test_as2d_equals_target_only(parts, task, instruction):
    target, source = parts
    for seed in range(2):
        request = Request(f"{task}-{seed}", speech(seed + 2), language="en", task=task, instruction=instruction)
        ref = run_request(request, target, None, "target-only")
        result = run_request(request, target, source, "as2d", DecodeOptions(budget=3, publication_size=2),
                             bridge=resolve_bridge(source, target))
        assert result.tokens == ref.tokens and result.text == ref.text
        assert result.producer_error is None
        assert len(ref.tokens) == 24


def test_target_output_depends_on_the_audio(parts):
    """Different sounds, same prompt text: the target's greedy tokens differ in most positions."""
    target, _ = parts
    first, second = (run_request(Request(f"a{seed}", speech(seed), language="en"), target, None, "target-only").tokens
                     for seed in (0, 1))
    assert len(first) == len(second) == 24
    assert sum(a != b for a, b in zip(first, second)) >= 12


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


def test_missing_mnn_files_are_named(tmp_path):
    from as2d_core.setup.paths import ModelFilesMissing
    from as2d_omni.plugin import _target

    folder = tmp_path / "qwen2.5-omni-7b"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ModelFilesMissing, match=r"lacks llm_config.json, llm.mnn, llm.mnn.weight, tokenizer.mtok, audio.mnn"):
        _target({"models_dir": tmp_path})
    with pytest.raises(ModelFilesMissing, match="does not exist; expected layout: a folder exported by MNN's llmexport"):
        _target({"models_dir": tmp_path / "nowhere"})


def test_missing_torch_files_are_named(tmp_path):
    from as2d_core.setup.paths import ModelFilesMissing
    from as2d_omni.plugin import _target

    folder = tmp_path / "qwen2.5-omni-7b"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    options = {"models_dir": tmp_path, "backend": "torch"}
    with pytest.raises(ModelFilesMissing, match=r"lacks model.safetensors, tokenizer.json, tokenizer_config.json, "
                                                r"preprocessor_config.json, chat_template.json; expected layout: the Hugging "
                                                r"Face checkpoint folder of Qwen/Qwen2.5-Omni-7B"):
        _target(options)
    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    (folder / "model-00001-of-00002.safetensors").write_text("")
    with pytest.raises(ModelFilesMissing, match=r"lacks model-00002-of-00002.safetensors, tokenizer.json"):
        _target(options)
    with pytest.raises(ModelFilesMissing, match="does not exist; expected layout: the Hugging Face checkpoint folder"):
        _target({"models_dir": tmp_path / "nowhere", "backend": "torch"})
    with pytest.raises(ValueError, match="unknown backend 'onnx'"):
        _target({"models_dir": tmp_path, "backend": "onnx"})


@needs_torch
def test_torch_refuses_a_checkpoint_missing_thinker_weights(tmp_path):
    """transformers would fill a missing weight with random values; loading names it instead."""
    from safetensors.torch import load_file, save_file

    from as2d_omni.plugin import _target

    folder = tmp_path / "qwen2.5-omni-7b"
    shutil.copytree(FIXTURES / "tiny-omni-7b-hf", folder)
    weights = load_file(folder / "model.safetensors")
    del weights["thinker.lm_head.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(RuntimeError, match=r"weights would be random: lm_head.weight"):
        _target({"models_dir": tmp_path, "backend": "torch"})


def test_qa_without_question_is_refused(parts):
    target, _ = parts
    with pytest.raises(ValueError, match="needs the question"):
        target.prepare(Request("q", speech(0), task="qa"), threads=1)


@pytest.mark.parametrize("plugins_loaded,owner", [("omni", "omni"), ("omni,qwen3_asr", "qwen3_asr")])
def test_one_torch_backend_for_both_qwen_plugins(monkeypatch, plugins_loaded, owner):
    """The omni plugin registers the torch backend only where the qwen3_asr plugin has not; neither fails."""
    from as2d_core.setup import catalog, plugins

    installed = {ep.name for ep in plugins.metadata.entry_points(group=plugins.GROUP)}
    if not set(plugins_loaded.split(",")) <= installed:
        pytest.skip(f"not all of {plugins_loaded} are installed")
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, plugins_loaded)
    try:
        registry = plugins.load_registry(refresh=True)
        assert registry.find("backend", "torch").plugin == owner
        assert all(p["error"] is None for p in registry.plugins), registry.plugins
        assert "torch" in registry.find("target", "qwen2.5-omni-7b").info["backends"]
    finally:
        plugins._REGISTRY = None
        catalog._PROBES.clear()
