"""Tokenizer bridges: identity, and text with word hold-back."""
import re
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenizer_bridges import IdentityBridge, TextBridge
from tokenizer_bridges.text import last_word_start


class CharTokenizer:
    """Drafter side: one token per character (like byte-level pieces)."""

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


class WordTokenizer:
    """Target side: GPT-2 style pre-tokens (words with their leading space, digit runs, punctuation
    runs), each merged as a whole, so a cut inside a pre-token would change the ids, as in BPE."""

    PRE_TOKENS = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")

    def encode(self, text):
        return [zlib.crc32(piece.encode()) % 100000 for piece in self.PRE_TOKENS.findall(text)]


def run_bridge(text, chunks):
    bridge = TextBridge(CharTokenizer().decode, WordTokenizer().encode, target_eos=-1)
    ids = [ord(c) for c in text]
    out, position = [], 0
    for size in chunks:
        piece = ids[position : position + size]
        position += size
        tokens, _ = bridge.push(piece, [0.9] * len(piece))
        out.extend(tokens)
    tokens, _ = bridge.push(ids[position:], None)
    out.extend(tokens)
    tail, _ = bridge.finish(ended_with_eos=True)
    return out + tail


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.text(alphabet="abc,.'你好", min_size=1, max_size=6), min_size=1, max_size=12),
    chunks=st.lists(st.integers(1, 7), max_size=30),
)
def test_published_tokens_equal_whole_text_encoding(words, chunks):
    text = "".join(" " + w for w in words)
    assert run_bridge(text, chunks) == WordTokenizer().encode(text) + [-1]


def test_real_whisper_tokenizer_pieces_equal_whole():
    """The cut rule on the real target tokenizer: English with punctuation, and unspaced Chinese."""
    from tokenizers import Tokenizer

    from as2d_core.setup.paths import models_dir

    path = models_dir() / "whisper-base" / "tokenizer.json"
    assert path.is_file(), f"{path} missing: run `as2d models install whisper-base`"
    tok = Tokenizer.from_file(str(path))
    encode = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    for text in (" Printing, in the only sense, differs (from) most: if not all.", "而对楼市成交抑制作用最大的，限购自六月底。呼和浩特市"):
        assert run_bridge_with(text, encode, [3, 5, 2, 7, 1, 4] * 20) == encode(text) + [-1], text


def run_bridge_with(text, encode, chunks):
    bridge = TextBridge(CharTokenizer().decode, encode, target_eos=-1)
    ids, out, position = [ord(c) for c in text], [], 0
    for size in chunks:
        out.extend(bridge.push(ids[position : position + size], None)[0])
        position += size
    out.extend(bridge.push(ids[position:], None)[0])
    return out + bridge.finish(ended_with_eos=True)[0]


def test_unfinished_word_is_held_back():
    bridge = TextBridge(CharTokenizer().decode, WordTokenizer().encode, target_eos=-1)
    tokens, _ = bridge.push([ord(c) for c in " hello wor"], None)
    assert tokens == WordTokenizer().encode(" hello")
    tokens, _ = bridge.push([ord(c) for c in "ld"], None)
    assert tokens == []  # " world" might still grow
    tokens, _ = bridge.finish(ended_with_eos=False)
    assert tokens == WordTokenizer().encode(" world")


def test_confidence_is_the_lowest_behind_each_word():
    bridge = TextBridge(CharTokenizer().decode, WordTokenizer().encode, target_eos=-1)
    ids = [ord(c) for c in " ab cd "]
    tokens, conf = bridge.push(ids[:5], [0.9, 0.2, 0.8, 0.7, 0.6])  # " ab" finished, " c" held
    assert len(tokens) == 1 and conf == [0.2]
    tokens, conf = bridge.push(ids[5:], [0.5, 0.9])
    tokens, conf = bridge.finish(ended_with_eos=True)
    assert conf[0] == 0.5


def test_last_word_start():
    assert last_word_start(" the cat", 0) == 4
    assert last_word_start(" the", 0) == 0
    assert last_word_start("你好，世界", 0) == 2  # unspaced text is cut at its punctuation
    assert last_word_start(" end,", 0) == 0  # a trailing punctuation run may still grow
    assert last_word_start(" can't", 0) == 0  # never inside a word at an apostrophe


def test_identity_maps_end_token():
    bridge = IdentityBridge(source_eos=9, target_eos=1)
    assert bridge.push([3, 9], [0.5, 0.4]) == ([3, 1], [0.5, 0.4])
    assert bridge.finish(True) == ([1], None)


def test_timestamps_cross_between_whisper_vocabularies_and_end_their_segments_text():
    """A drafter timestamp (ids from 1000 here) passes as the target's of the same time (from 5000), and the
    text before it is converted whole: a segment's text is encoded on its own."""
    bridge = TextBridge(lambda ids: CharTokenizer().decode([i for i in ids if i < 1000]), WordTokenizer().encode,
                        target_eos=-1, timestamps=(1000, 5000))
    segment = [ord(c) for c in " ab cd"]
    tokens, confidences = bridge.push([1000, *segment[:5]], [0.9] * 6)
    assert tokens == [5000, *WordTokenizer().encode(" ab")] and confidences == [0.9] * 2  # " c" is held back
    tokens, _ = bridge.push([*segment[5:], 1120, 1120, ord(" "), ord("e")], None)
    assert tokens == [*WordTokenizer().encode(" cd"), 5120, 5120]  # " cd" ended by its closing timestamp
    tokens, _ = bridge.finish(ended_with_eos=True)
    assert tokens == [*WordTokenizer().encode(" e"), -1]
