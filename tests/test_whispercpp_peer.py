"""whisper.cpp as a peer: the real whisper-base weights written as ggml f16, read back, and run by whisper.cpp.

The file's layout is checked by reading it back here (no whisper.cpp needed); whisper.cpp (pywhispercpp)
then loads it and transcribes a bundled clip, which must read as as2d's target-only output on the same
weights does (f16 against fp32 arithmetic: nearly the same text, token equality is reported).
"""
import difflib
import struct

import numpy as np
import pytest

from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.input.audio import load_audio
from as2d_bench.peers import peer_row
from as2d_bench.runner import ManifestRow
from conftest import full_only, speech_row

CLIP = speech_row("librivox_sense_0870")


@pytest.fixture(scope="module")
def ggml_file(tmp_path_factory):
    """The real whisper-base, converted into a folder of its own (about a second)."""
    pytest.importorskip("tokenizers")
    from as2d_whisper.convert.ggml import build_ggml_file

    root = tmp_path_factory.mktemp("models")
    return root, build_ggml_file("whisper-base", root / "ggml-whisper-base")


def _read_ggml(path):
    """The header, filters, vocabulary and each tensor's (dims as numpy orders them, type, bytes) of a ggml file."""
    data = path.read_bytes()
    at = 0

    def ints(n):
        nonlocal at
        values = struct.unpack_from(f"<{n}i", data, at)
        at += 4 * n
        return values

    magic = struct.unpack_from("<I", data, 0)[0]
    at = 4
    hparams = ints(11)
    n_mels, n_freq = ints(2)
    filters = np.frombuffer(data, "<f4", n_mels * n_freq, at).reshape(n_mels, n_freq)
    at += 4 * n_mels * n_freq
    tokens = []
    for _ in range(ints(1)[0]):
        (length,) = ints(1)
        tokens.append(data[at:at + length])
        at += length
    tensors = {}
    while at < len(data):
        n_dims, name_length, kind = ints(3)
        dims = tuple(reversed(ints(n_dims)))
        name = data[at:at + name_length].decode()
        at += name_length
        size = int(np.prod(dims)) * (2 if kind == 1 else 4)
        tensors[name] = (dims, kind, data[at:at + size])
        at += size
    return magic, hparams, filters, tokens, tensors


def test_the_ggml_file_holds_whisper_base_as_whisper_cpp_reads_it(ggml_file):
    from tokenizers import Tokenizer

    from as2d_whisper.convert.weights import load_ct2_weights, source_files
    from as2d_whisper.features import mel_filters

    _, path = ggml_file
    files = source_files("whisper-base")
    magic, hparams, filters, tokens, tensors = _read_ggml(path)
    assert magic == 0x67676D6C
    assert hparams == (51865, 1500, 512, 8, 6, 448, 512, 8, 6, 80, 1)  # base; ftype 1: f16
    np.testing.assert_array_equal(filters, mel_filters(80).astype(np.float32))
    tokenizer = Tokenizer.from_file(str(files["tokenizer"]))
    assert len(tokens) == tokenizer.token_to_id("<|endoftext|>") == 50257  # the ordinary tokens only
    assert tokens[tokenizer.token_to_id("Ġthe")] == b" the"  # raw bytes, not GPT-2's stand-in characters
    assert b"".join(tokens[i] for i in tokenizer.encode("naïve café", add_special_tokens=False).ids) == "naïve café".encode()
    # the encoder's stem, 15 tensors per encoder layer (the key has no bias), its norm; the decoder's two
    # embeddings, 24 per layer (with cross-attention), its norm: as whisper.cpp names them, none more
    assert len(tensors) == 5 + 6 * 15 + 2 + 2 + 6 * 24 + 2
    assert "encoder.blocks.0.attn.key.bias" not in tensors and "decoder.blocks.5.cross_attn.key.weight" in tensors
    assert tensors["encoder.conv1.bias"][:2] == ((512, 1), 0)
    assert tensors["encoder.conv2.weight"][:2] == ((512, 512, 3), 1)
    assert tensors["decoder.positional_embedding"][:2] == ((448, 512), 0)
    assert tensors["decoder.blocks.0.mlp_ln.weight"][:2] == ((512,), 0)
    state, _ = load_ct2_weights(files["weights"])
    dims, kind, raw = tensors["decoder.token_embedding.weight"]
    assert (dims, kind) == ((51865, 512), 1)
    # the shipped weights are fp16: the f16 file holds them bit for bit
    np.testing.assert_array_equal(np.frombuffer(raw, "<f2").reshape(dims),
                                  state["model.decoder.embed_tokens.weight"].astype(np.float16))


def test_byte_decoder_inverts_gpt2_byte_level_alphabet():
    from as2d_whisper.convert.ggml import byte_decoder

    table = byte_decoder()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n") and table["a"] == ord("a")


@full_only  # a peer for the benchmarks: run with them, and in the full run
def test_whisper_cpp_transcribes_a_clip_as_the_target_does(ggml_file, whisper_target):
    pytest.importorskip("pywhispercpp", reason="the whisper.cpp peer needs pywhispercpp: pip install pywhispercpp "
                                               "(or 'as2d[bench]')")
    from as2d_whisper.whispercpp import WhisperCppPeer

    root, _ = ggml_file
    audio = load_audio(CLIP["file"])
    reference = run_request(Request(CLIP["id"], audio, "en"), whisper_target, None, "target-only")
    peer = WhisperCppPeer(threads=1, root=root)  # one thread: its spinning threads stall on a busy machine
    window = ManifestRow(CLIP["id"], CLIP["file"], "en")
    row = peer_row(window, "whisper.cpp", peer, audio, reference, detect_language=True)  # whisper.cpp detects
    assert "error" not in row and row["language"] == "en"
    assert row["tokens"] > 10 and 0 < row["decode_s"] < row["e2e_s"]
    assert isinstance(row["exact"], bool) and "temperature 0, no fallback" in row["note"]
    similarity = difflib.SequenceMatcher(None, row["text"].split(), reference.text.split()).ratio()
    assert similarity > 0.9, (row["text"], reference.text)
    whole = peer.transcribe_file(audio, "en")
    assert whole.segments >= 1 and "Dashwood" in whole.text
    print(f"whisper.cpp exact={row['exact']} text={row['text']!r}")


def test_a_file_whisper_cpp_cannot_load_is_a_clear_error(tmp_path):
    pytest.importorskip("pywhispercpp", reason="the whisper.cpp peer needs pywhispercpp: pip install pywhispercpp")
    from as2d_core.setup.peers import PeerUnavailable
    from as2d_whisper.convert.ggml import FILE_NAME
    from as2d_whisper.whispercpp import GGML_FOLDER, WhisperCppPeer

    folder = tmp_path / GGML_FOLDER
    folder.mkdir()
    (folder / FILE_NAME).write_bytes(b"not a ggml file")
    (folder / "model.json").write_text("{}")
    with pytest.raises(PeerUnavailable, match="could not load .*bad magic"):
        WhisperCppPeer(threads=1, root=tmp_path)
