"""Committed text as it is verified (``stream=true``, ``Pipeline.transcribe(on_text=...)``).

The engine hands each verification's committed tokens to ``on_commit``; ``TextDeltas`` turns them into
text pieces that are never taken back: they hold back an unfinished multi-byte character and trailing
whitespace, and join windows as ``Transcript.text`` does, so the pieces spell the transcript exactly.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.decode.request import run_request
from as2d_core.decode.deltas import UNFINISHED, TextDeltas
from as2d_core.decode.options import DecodeOptions
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from conftest import speech_audio
from tiny_lm import ScriptedSource, TinyLM, edited_draft

MODEL = TinyLM()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 5), budget=st.integers(1, 12), method=st.sampled_from(["as2d", "target-only"]),
       edits=st.lists(st.tuples(st.sampled_from(["keep", "sub", "ins", "del"]), st.integers(0, 31)), max_size=30))
def test_on_commit_hears_each_committed_token_once_in_order(tiny_request, seed, budget, method, edits):
    request = tiny_request(seed)
    reference = run_request(request, MODEL, None, "target-only").tokens
    drafted, _ = edited_draft(reference, edits)
    heard: list[list[int]] = []
    result = run_request(request, MODEL, ScriptedSource(drafted) if method == "as2d" else None, method,
                         DecodeOptions(budget=budget), on_commit=lambda _session, tokens: heard.append(list(tokens)))
    assert result.tokens == reference
    assert [t for tokens in heard for t in tokens] == reference and all(heard)
    assert len(heard) <= result.verify_calls + result.target_only_steps + 1  # at most one call per verification


def test_on_commit_hears_a_response_cut_at_the_length_limit(tiny_request):
    short = TinyLM(max_new_tokens=5)
    heard: list[int] = []
    result = run_request(tiny_request(0), short, None, "target-only", on_commit=lambda _s, tokens: heard.extend(tokens))
    assert len(result.tokens) == 5 and heard == result.tokens


class ByteSession:
    """A byte-level tokenizer's decoding: each token is some bytes, a split character decodes to U+FFFD."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces

    def decode_text(self, tokens) -> str:
        return b"".join(self.pieces[t] for t in tokens).decode("utf-8", errors="replace")


def _spoken(windows: list[str]) -> str:
    return " ".join(text.strip() for text in windows if text.strip())


@settings(max_examples=200, deadline=None)
@given(windows=st.lists(st.text(alphabet=st.sampled_from(list("ab .,\n") + ["é", "日", "本", "🙂"]), max_size=24),
                        min_size=1, max_size=4),
       data=st.data())
def test_pieces_spell_the_transcript_and_are_never_revised(windows, data):
    pieces: list[str] = []
    deltas = TextDeltas(pieces.append)
    for text in windows:
        raw = text.encode()
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(raw) - 1)), max_size=len(raw))))
        tokens = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)]) if b > a]
        session = ByteSession(tokens)
        groups = data.draw(st.lists(st.integers(1, 3), min_size=len(tokens), max_size=len(tokens)))
        at = 0
        for size in groups:
            if at >= len(tokens):
                break
            deltas.commit(session, range(at, min(at + size, len(tokens))))
            at += size
            sent = "".join(pieces)
            assert _spoken(windows).startswith(sent)  # what was sent is final
        deltas.end_window(session.decode_text(range(len(tokens))))
    assert "".join(pieces) == _spoken(windows)
    assert all(pieces) and not any(UNFINISHED in piece for piece in pieces)


def test_whispers_tokenizer_splits_characters_and_the_pieces_wait_for_them():
    tokenizers = pytest.importorskip("tokenizers")
    from as2d_core.setup.paths import models_dir

    path = models_dir() / "whisper-base" / "tokenizer.json"
    if not path.is_file():
        pytest.fail(f"{path} is missing; run `as2d models install whisper-base`")
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    text = " 今日は良い天気ですね。Ça va? 🙂 Oui."
    ids = tokenizer.encode(text, add_special_tokens=False).ids

    class Session:
        def decode_text(self, tokens):
            return tokenizer.decode(list(tokens))

    split = [i for i in range(1, len(ids)) if UNFINISHED in tokenizer.decode(ids[:i])]
    assert split  # some prefix ends inside a character: the case the hold-back is for
    pieces: list[str] = []
    deltas = TextDeltas(pieces.append)
    for token in ids:
        deltas.commit(Session(), [token])
    deltas.end_window(tokenizer.decode(ids))
    assert "".join(pieces) == text.strip() and not any(UNFINISHED in piece for piece in pieces)


def test_a_two_window_file_streams_its_transcript(whisper_target, whisper_ct2_source):
    """Real speech in two windows (cut at the pause): the pieces arrive as each window is verified and spell
    the transcript, windows joined by a space."""
    audio = np.concatenate([speech_audio("cmu_cards_en_w00"), speech_audio("cmu_cards_en_w01")])
    options = PipelineOptions(language="en", decode=DecodeOptions(route="windows", chunk_length=6))
    pieces: list[str] = []
    transcript = build_pipeline(whisper_target, whisper_ct2_source, options).transcribe(audio, on_text=pieces.append)
    assert len(transcript.windows) == 2 and all(w.text for w in transcript.windows)
    assert "".join(pieces) == transcript.text and len(pieces) > 2
    assert any(piece.startswith(" ") for piece in pieces[1:])  # the second window's first piece
