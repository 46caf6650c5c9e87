"""whisper-base target: greedy decoding through the session equals faster-whisper,
batched verification equals single steps, and truncation repairs the cache exactly.

These tests need the converted models (``as2d models install whisper-base
whisper-tiny.en``) in $AS2D_MODELS_DIR or ~/.local/share/as2d/models; they fail,
never skip, when the models are absent, so a missing install cannot pass silently.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.contracts import Request, ScoreRules, Target, TargetSession
from as2d_core.decode.loop import greedy_reference

from conftest import full_only, speech_audio, speech_row
from conftest import WHISPER_INSTALL as INSTALL
from drafting import PacedTarget

# English and non-English items, short enough to keep the file near a minute; the first two are
# in the repository's speech set, the others only in the shared one (skipped where it is absent).
CASES = [
    "librivox_sense_en_w01",
    "cmu_cards_en_w00",
    pytest.param("fleurs_en_w02", marks=full_only),  # a second English and a third language: the full run's
    pytest.param("fleurs_de_w00", marks=full_only),
    "aishell1_BAC009S0002W0122",
    "fleurs_fr_008",
]


RULES_AUDIO = speech_audio("librivox_sense_en_w01")


@pytest.fixture(scope="module")
def target(whisper_target):
    return whisper_target


@pytest.fixture(scope="module")
def faster_whisper_base(tmp_path_factory):
    """faster-whisper on a CTranslate2 folder assembled from the same PyPI packages."""
    from faster_whisper import WhisperModel

    from as2d_whisper.peers import build_ct2_folder

    folder = build_ct2_folder(tmp_path_factory.mktemp("ct2"))
    return WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2)


def test_protocols(target):
    audio = speech_audio("cmu_cards_en_w00")
    session = target.prepare(Request("p", audio, language="en"), threads=1)
    try:
        assert isinstance(target, Target) and isinstance(session, TargetSession)
        assert target.vocabulary == "whisper-multilingual" and session.eos_token == 50257
        assert session.max_new_tokens == 448 // 2 and session.cache_length == 0  # CTranslate2's bound (response_room)
        assert target.device_in_use == ["CPUExecutionProvider"]
    finally:
        session.close()


@pytest.mark.parametrize("item_id", CASES)
def test_greedy_equals_faster_whisper(target, faster_whisper_base, item_id):
    from as2d_core.decode.loop import greedy_reference

    audio, item = speech_audio(item_id), speech_row(item_id)
    session = target.prepare(Request(item_id, audio, language=item["lang"]), threads=2)
    try:
        ours = greedy_reference(session)
        text = session.decode_text(ours)
    finally:
        session.close()
    segments, _ = faster_whisper_base.transcribe(
        audio, language=item["lang"], beam_size=1, temperature=0, without_timestamps=True,
        condition_on_previous_text=False, vad_filter=False)
    reference = [t for seg in list(segments)[:1] for t in seg.tokens]
    assert ours == reference, f"{item_id}: ours {text!r}"


def test_language_detection(target, monkeypatch):
    """German detected from the encoder output the transcription uses: one encoder pass, not two."""
    monkeypatch.setattr(target.model, "audio_cache_size", 0)  # other tests may have cached this audio's encoding
    executor = target.model.executor
    encode, calls = executor.encode, []
    monkeypatch.setattr(executor, "encode", lambda *args: calls.append(args[0]) or encode(*args))
    audio = speech_audio("fleurs_de_w00")
    session = target.prepare(Request("de", audio), threads=2)
    try:
        assert session.language == "de"
        assert calls == [target.model.encoder_file]
    finally:
        session.close()


def test_batched_verify_and_truncate(target):
    audio = speech_audio("librivox_sense_en_w01")
    check_batched_verify_and_truncate(target, audio)


def check_batched_verify_and_truncate(target, audio):
    """One batched call equals single steps; a rejected suffix cut from the cache continues exactly."""
    from as2d_core.decode.loop import greedy_reference

    session = target.prepare(Request("speech", audio, language="en"), threads=2)
    try:
        reference = greedy_reference(session, max_new_tokens=24)
        session.truncate(0)
        # One call verifying the whole run returns every next greedy token.
        out = session.verify(reference[0], reference[1:16])
        assert out == reference[1:17]
        assert session.cache_length == 16
        # A wrong candidate at index 5: accept the prefix, cut the cache, carry on (on 1 thread).
        session.truncate(0)
        wrong = list(reference[1:9])
        wrong[4] = (wrong[4] + 1) % 50000
        out = session.verify(reference[0], wrong)
        assert out[:5] == reference[1:6]
        session.truncate(5)  # keep root + 4 accepted candidates
        tokens = reference[:6]
        session.use_threads(1)
        while len(tokens) < len(reference):
            tokens.append(session.verify(tokens[-1], [])[0])
        assert tokens == reference
    finally:
        session.close()


def test_scores_stay_in_step_with_the_cache(target):
    """With ``Request.scores``: one log-probability per cached position plus one, cut back with the cache, each the
    log-softmax of the greedy token's logits as one step at a time gives it (up to a batched call's rounding)."""
    from as2d_core.capabilities import ResponseScores
    from as2d_core.decode.loop import greedy_reference

    audio = speech_audio("librivox_sense_en_w01")
    stepped = target.prepare(Request("steps", audio, language="en", scores=True), threads=2)
    batched = target.prepare(Request("batched", audio, language="en", scores=True), threads=2)
    plain = target.prepare(Request("plain", audio, language="en"), threads=2)
    try:
        assert isinstance(stepped, ResponseScores)
        reference = greedy_reference(stepped, max_new_tokens=24)
        expected = stepped.token_logprobs()
        assert len(expected) == stepped.cache_length + 1 == len(reference)
        assert all(value <= 0 for value in expected) and 0 <= stepped.no_speech_prob() < 0.5
        wrong = list(reference[1:9])
        wrong[4] = (wrong[4] + 1) % 50000
        assert batched.verify(reference[0], wrong)[:5] == reference[1:6]
        batched.truncate(5)
        assert len(batched.token_logprobs()) == 6
        tokens = reference[:6]
        while len(tokens) < len(reference):
            tokens.append(batched.verify(tokens[-1], [])[0])
        assert tokens == reference
        assert batched.token_logprobs() == pytest.approx(expected, abs=1e-4)
        assert batched.no_speech_prob() == pytest.approx(stepped.no_speech_prob(), abs=1e-6)
        assert greedy_reference(plain, max_new_tokens=24) == reference  # scores change no token
        with pytest.raises(ValueError, match="only for a request that asks for scores"):
            plain.token_logprobs()
    finally:
        for session in (stepped, batched, plain):
            session.close()


def test_every_method_gets_the_targets_scores(target, whisper_ct2_source):
    """as2d's drafted windows score as target-only's: the same tokens, the same log-probabilities (up to the
    rounding of batched verification); a request that does not ask gets none."""
    from as2d_core.decode.request import run_request
    from as2d_core.setup.catalog import resolve_bridge

    bridge = resolve_bridge(whisper_ct2_source, target)
    for item in ("cmu_cards_en_w00", "librivox_sense_en_w00"):
        request = Request(item, speech_audio(item), language="en", scores=True)
        alone = run_request(request, target, None, "target-only")
        # paced: on a machine whose drafter is slower than its target, the drafts still arrive while it decodes
        drafted = run_request(request, PacedTarget(target), whisper_ct2_source, "as2d", bridge=bridge)
        assert drafted.tokens == alone.tokens
        assert drafted.avg_logprob == pytest.approx(alone.avg_logprob, abs=1e-4) and -1 < alone.avg_logprob < 0
        assert drafted.no_speech_prob == pytest.approx(alone.no_speech_prob, abs=1e-6)
        assert drafted.accepted > 0
        plain = run_request(Request(item, speech_audio(item), language="en"), target, None, "target-only")
        assert plain.tokens == alone.tokens and plain.avg_logprob is None and plain.no_speech_prob is None


def test_missing_model_dir_names_install_command(tmp_path):
    from as2d_whisper.target import WhisperTarget

    with pytest.raises(FileNotFoundError, match="as2d models install whisper-base whisper-tiny.en") as exc:
        WhisperTarget(tmp_path / "nowhere")
    assert "model.json" in str(exc.value) and "decoder.onnx" in str(exc.value)


def test_nnapi_refused_without_provider(target):
    import onnxruntime as ort

    from as2d_whisper.target import WhisperTarget

    if "NnapiExecutionProvider" in ort.get_available_providers():  # ONNX Runtime's name for the NNAPI provider
        assert WhisperTarget(target.model.dir, backend_device="nnapi").device == "nnapi"
    else:
        with pytest.raises(RuntimeError, match="NnapiExecutionProvider"):
            WhisperTarget(target.model.dir, backend_device="nnapi")


def test_decoder_binds_the_audio_in_place(target):
    """The decoder takes each layer's audio K and V as an input of its own, fed as views of the encoder's
    array: a step copies no audio (slicing one stacked input made ONNX Runtime copy 36 MB a step)."""
    from as2d_whisper.graph_io import audio_feed, audio_input_names

    model = target.model
    session = model.executor.session(model.decoder_file, 1)
    names = [i.name for i in session.get_inputs()]
    assert names == ["tokens", "past", *audio_input_names(model.n_layers)]
    cross = np.arange(model.n_layers * 2 * 3 * 4, dtype=np.float32).reshape(model.n_layers, 2, 3, 1, 4)
    feed = audio_feed(cross)
    assert list(feed) == names[2:]
    for layer in range(model.n_layers):
        for kind, name in enumerate(("cross_k", "cross_v")):
            block = feed[f"{name}{layer}"]
            assert np.shares_memory(block, cross) and np.array_equal(block, cross[layer, kind])


def test_an_older_model_format_is_refused_and_converted_again(target, tmp_path):
    """A folder converted by an earlier plugin is refused with the command that converts it again, and
    that command does not take the folder as installed."""
    from as2d_whisper.plugin import REQUIRED_FILES, _installed
    from as2d_whisper.target import WhisperTarget

    old = tmp_path / "whisper-base"
    shutil.copytree(target.model.dir, old)
    assert _installed(old, REQUIRED_FILES)
    meta = json.loads((old / "model.json").read_text())
    (old / "model.json").write_text(json.dumps({**meta, "format_version": 1}))
    assert not _installed(old, REQUIRED_FILES)
    with pytest.raises(FileNotFoundError, match="holds model format 1.*as2d models install whisper-base"):
        WhisperTarget(old)


def test_every_graph_keeps_its_weights_beside_it_and_a_missing_weights_file_is_named(target, tmp_path):
    """Each installed graph's weights lie in NAME.onnx.data beside a small graph (ONNX Runtime maps them rather than
    copying them, ``convert.onnx_export.save_graph``); a folder that lost one is refused with the file's name and
    the command that installs it, and the installer does not take it as installed."""
    from as2d_whisper.plugin import REQUIRED_FILES, _installed
    from as2d_whisper.target import WhisperTarget

    graphs = sorted(target.model.dir.glob("*.onnx"))
    assert {"encoder.onnx", "decoder.onnx"} <= {g.name for g in graphs}
    for graph in graphs:
        assert graph.with_name(graph.name + ".data").stat().st_size > 50 * graph.stat().st_size, graph.name
    partial = tmp_path / "whisper-base"
    partial.mkdir()
    for file in target.model.dir.iterdir():
        if file.name != "decoder.onnx.data":
            (partial / file.name).symlink_to(file)
    assert not _installed(partial, REQUIRED_FILES)
    with pytest.raises(FileNotFoundError, match="lacks decoder.onnx.data.*as2d models install whisper-base"):
        WhisperTarget(partial)


def test_weights_mapped_from_beside_the_graph_compute_the_same_bits_as_weights_inside_it(target):
    """Format 4 moved the weights out of the graph (``save_graph``); ONNX Runtime must compute with them exactly as
    with the same weights inside the graph, or every transcript made before would change."""
    import onnx
    import onnxruntime as ort

    from as2d_whisper.graph_io import audio_input_names

    path = target.model.dir / "decoder.onnx"
    inside = onnx.load(str(path)).SerializeToString()  # the weights read back into the protobuf
    assert len(inside) > 50 * path.stat().st_size
    rng = np.random.default_rng(0)
    model = target.model
    feed = {name: rng.normal(size=(model.n_heads, 1500, model.head_dim)).astype(np.float32)
            for name in audio_input_names(model.n_layers)}
    feed["past"] = rng.normal(size=(5, model.n_layers, 2, model.n_heads, model.head_dim)).astype(np.float32)
    feed["tokens"] = np.array([[model.sot, 440, 3542, 337]], np.int64)
    beside = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)
    embedded = ort.InferenceSession(inside, providers=["CPUExecutionProvider"]).run(None, feed)
    assert all(np.array_equal(a, b) for a, b in zip(beside, embedded, strict=True))


def _anonymous_mb() -> float:
    rollup = Path("/proc/self/smaps_rollup")
    if not rollup.is_file():
        pytest.skip("reads this process's anonymous memory from Linux's /proc/self/smaps_rollup")
    return next(int(line.split()[1]) for line in rollup.read_text().splitlines()
                if line.startswith("Anonymous:")) / 1024


def test_the_optimized_copy_computes_the_same_bits_and_its_sessions_share_the_packed_weights(target):
    """The target's sessions run this machine's optimized copy of each graph (``as2d_onnxruntime.sessions``): the
    decoder and the encoder compute the same bits as the graphs as converted, one more decoder session maps
    the packed weights from the copy instead of packing its own (before: about 190 MB more each), and the beams
    graph reads its packed weights where the decoder reads them (before: a file of its own, 236 MB more)."""
    import onnx
    import onnxruntime as ort

    from as2d_onnxruntime.sessions import WEIGHTS_FILE, _blocks, optimized_copy, ort_session
    from as2d_whisper.graph_io import audio_input_names

    model = target.model
    rng = np.random.default_rng(0)
    feed = {name: rng.normal(size=(model.n_heads, 1500, model.head_dim)).astype(np.float32)
            for name in audio_input_names(model.n_layers)}
    feed["past"] = rng.normal(size=(5, model.n_layers, 2, model.n_heads, model.head_dim)).astype(np.float32)
    feed["tokens"] = np.array([[model.sot, 440, 3542, 337]], np.int64)
    mel = {"mel": rng.normal(size=(1, model.n_mels, 3000)).astype(np.float32)}
    as_converted = {}
    for graph, inputs in (("decoder.onnx", feed), ("encoder.onnx", mel)):
        path = model.dir / graph
        assert optimized_copy(path) is not None
        as_converted[graph] = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)
        copied = ort_session(path, "cpu", 2)[0].run(None, inputs)
        assert all(np.array_equal(a, b) for a, b in zip(as_converted[graph], copied, strict=True)), graph
    before = _anonymous_mb()
    another = ort_session(model.dir / "decoder.onnx", "cpu", 3)[0]
    grown = _anonymous_mb() - before
    assert grown < 60, f"one more decoder session took {grown:.0f} MB of its own"
    assert all(np.array_equal(a, b) for a, b in zip(as_converted["decoder.onnx"], another.run(None, feed), strict=True))

    def packed_blocks(graph: str) -> set[tuple[str, int, int]]:
        copy = onnx.load(str(optimized_copy(model.dir / graph)), load_external_data=False)
        return {({entry.key: entry.value for entry in tensor.external_data}["location"], *block)
                for tensor in copy.graph.initializer if any(entry.key.startswith("prepacked")
                                                             for entry in tensor.external_data)
                for block in (_blocks(tensor) or [])[1:]}

    beams = packed_blocks("decoder.beams.onnx")
    assert len(beams) >= 4 * model.n_layers and {location for location, *_ in beams} == {WEIGHTS_FILE}
    assert beams <= packed_blocks("decoder.onnx")


_WINDOWS_GROWTH = """
import sys
import numpy as np
from pathlib import Path
from as2d_onnxruntime.sessions import ort_session
def anonymous():
    rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
    return next(int(line.split()[1]) for line in rollup if line.startswith("Anonymous:")) / 1024
encoder = ort_session(Path(sys.argv[1]), "cpu", 2)[0]
mel = np.random.default_rng(0).normal(size=(1, 80, 3000)).astype(np.float32)
start, grown, alive = anonymous(), [], None
for window in range(3):
    alive = encoder.run(None, {"mel": mel})[0]  # the last window's audio K/V, alive while the next is encoded
    grown.append(anonymous() - start)
print(grown[0], grown[-1])
"""


def test_the_encoders_later_windows_take_no_more_memory_than_its_first(target):
    """Each window's audio K/V (the encoder's output) is alive while the next window is encoded. With ONNX
    Runtime's memory pattern the encoder took its second run's activations as one new block of the arena (148 MB
    more for whisper-base); allocated one by one they reuse what the first run freed. In a fresh process, so that
    the arena is this test's alone."""
    import subprocess
    import sys

    if not Path("/proc/self/smaps_rollup").is_file():
        pytest.skip("reads the process's anonymous memory from Linux's /proc/self/smaps_rollup")
    model = target.model
    if model.n_mels != 80:
        pytest.skip("the installed target's encoder reads 80 mel bins")
    result = subprocess.run([sys.executable, "-c", _WINDOWS_GROWTH, str(model.dir / "encoder.onnx")],
                            capture_output=True, text=True, timeout=300, check=True)
    first, last = map(float, result.stdout.split())
    output = 2 * model.n_layers * model.n_heads * 1500 * model.head_dim * 4 / 2**20  # one window's audio K/V
    assert last - first < 2 * output + 16, f"the arena grew from {first:.0f} to {last:.0f} MB over three windows"


@full_only  # a developer's tool for the decoder graph, not a path a transcript takes
def test_decoder_profile_command_names_the_operators(target):
    """``as2d whisper-decoder-profile`` times the installed decoder's step and names where its time goes, and
    times the windows graph over several windows against single-window steps."""
    from click.testing import CliRunner

    from as2d_whisper.decoder_profile import profile_command

    result = CliRunner().invoke(profile_command, ["--past", "8", "--width", "3", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "width 1, 8 cached positions" in result.output and "width 3, 8 cached positions" in result.output
    assert "MatMul" in result.output
    batched = CliRunner().invoke(profile_command, ["--past", "8", "--width", "3", "--threads", "1", "--batched", "1,2"])
    assert batched.exit_code == 0, batched.output
    assert "| width | B | one call (ms) |" in batched.output and "\n| 3 | 2 | " in batched.output


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(penalty=st.sampled_from([1.0, 1.3, 4.0]), ngram=st.sampled_from([0, 1, 2, 3]), blank=st.booleans(),
       prefix=st.sampled_from([None, "Ten", "He was not"]), timestamps=st.booleans(),
       edits=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 51864)), max_size=6), width=st.integers(1, 9))
def test_score_rules_verify_any_proposal_as_single_steps(target, penalty, ngram, blank, prefix, timestamps, edits,
                                                         width):
    """A request's score rules (faster-whisper's repetition penalty, n-gram ban, blank suppression, a forced
    prefix; with and without timestamps) on whisper-base: verifying any proposal, of any width, accepts exactly
    the tokens one step at a time gives, so speculation stays exact under every rule (each reads only the
    history before the position it scores)."""
    rules = ScoreRules(suppress_blank=blank, repetition_penalty=penalty, no_repeat_ngram_size=ngram)
    request = Request("rules", RULES_AUDIO, language="en", timestamps="segment" if timestamps else "none",
                      prefix=prefix, rules=rules)
    session = target.prepare(request, threads=2)
    try:
        reference = greedy_reference(session, max_new_tokens=40)  # 30 checked, and what a last proposal reaches
        reference += [session.eos_token] if len(reference) < 40 else []
        drafted = (list(reference[1:]) + [7] * 40)[:40]
        for position, token in edits:
            drafted[position] = token
        session.truncate(0)
        committed = reference[:1]
        while committed[-1] != session.eos_token and len(committed) < 30:
            proposal = drafted[len(committed) - 1:][:width]
            out = session.verify(committed[-1], proposal)
            matched = next((j for j, (p, o) in enumerate(zip(proposal, out)) if p != o), len(proposal))
            accepted = out[: matched + 1]
            accepted = accepted[: accepted.index(session.eos_token) + 1] if session.eos_token in accepted else accepted
            assert accepted == reference[len(committed): len(committed) + len(accepted)]
            committed += accepted
            session.truncate(len(committed) - 1)
        assert committed == reference[: len(committed)]
    finally:
        session.close()
