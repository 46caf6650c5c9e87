"""CrisperWhisper's speculative decoding (crisperwhisper-sd) as a peer, through its worker in its own environment.

The worker tests need the environment (`as2d peers install crisperwhisper`) and skip with that
instruction when it is absent, so CI does not depend on it. Without it the peer must say how to make
it, and an installation that cannot reach the package index must fail clearly and leave nothing behind.
"""
import pytest

from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.setup.peers import PeerUnavailable
from as2d_bench.peers import make_peers, peer_row
from as2d_bench.runner import ManifestRow
from as2d_whisper import crisper
from conftest import speech_row

CLIP = speech_row("librivox_sense_0870")["file"]
needs_env = pytest.mark.skipif(crisper.env_ready() is None,
                               reason=f"crisperwhisper's environment is absent: run `{crisper.INSTALL}`")


@pytest.fixture(scope="module")
def clip(whisper_target):
    window = ManifestRow("librivox_sense_0870", CLIP, "en")
    audio = load_audio(CLIP)
    return window, audio, run_request(Request(window.id, audio, "en"), whisper_target, None, "target-only")


def test_without_its_environment_the_peer_says_how_to_make_it(tmp_path):
    with pytest.raises(PeerUnavailable, match="as2d peers install crisperwhisper"):
        crisper.CrisperWhisperPeer(2, tmp_path / "models")


def test_an_install_that_cannot_reach_the_index_fails_clearly_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # and no configured mirror or wheel folder
    for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(crisper.PeerEnvError, match="could not install ctranslate2-crisperwhisper"):
        crisper.install_env(tmp_path / "models", log=lambda line: None)
    assert not crisper.env_dir(tmp_path / "models").exists()


@needs_env
def test_worker_protocol_greedy_speculative_and_a_failed_request(clip):
    """Speculative K=5 gives the fork's own greedy tokens (fp32); a bad request fails alone, the worker serves on."""
    from as2d_core.setup.paths import models_dir

    _, audio, reference = clip
    worker, vocab = crisper._worker(models_dir(), "float32", 2)
    features, prompt = crisper._features(audio), vocab.prompt("en")
    greedy = worker.decode("greedy", features, prompt)
    fixed = worker.decode("speculative", features, prompt, k=5)
    adaptive = worker.decode("speculative", features, prompt, k=5, k_min=2, k_max=10)
    assert len(greedy["tokens"]) > 10 and greedy["ended"]
    assert fixed["tokens"] == greedy["tokens"] == adaptive["tokens"] and fixed["ended"]
    assert vocab.eot not in fixed["tokens"] and min(fixed["encode_s"], fixed["decode_s"]) > 0
    assert "Dashwood" in vocab.tokenizer.decode(fixed["tokens"])
    with pytest.raises(PeerUnavailable, match="unknown mode"):
        worker.decode("beam", features, prompt)
    assert worker.decode("greedy", features, prompt)["tokens"] == greedy["tokens"]


@needs_env
@pytest.mark.parametrize("name", ["crisperwhisper-sd-k5", "crisperwhisper-sd-adaptive", "crisperwhisper-sd-k5-int8"])
def test_bench_rows_are_exact_against_the_forks_own_greedy(clip, name):
    window, audio, reference = clip
    peer = make_peers([name], threads=2)[name]
    row = peer_row(window, name, peer, audio, reference)
    assert row["exact_against"] == "own greedy" and isinstance(row["equals_target"], bool)
    assert row["e2e_s"] > row["decode_s"] > 0 and row["greedy_e2e_s"] > 0
    if "int8" not in name:  # the fork's strict loop keeps its greedy tokens; int8 is reported, not asserted
        assert row["exact"], f"{name} differs from the fork's greedy decode: {row['text']!r}"
    print(f"{name} exact={row['exact']} equals_target={row['equals_target']} e2e_s={row['e2e_s']:.2f} "
          f"greedy_e2e_s={row['greedy_e2e_s']:.2f} decode_s={row['decode_s']:.2f}")
    with pytest.raises(PeerUnavailable, match="English only"):
        peer(audio, "de")
