"""The forwarding wrappers: a wrapped source, target or session is the part itself, optional capabilities included.

Every wrapper in the project (lookahead, faults, the server's cancel flag) subclasses the core's
``SourceWrapper``/``TargetWrapper``/``SessionWrapper``; none forwards through ``__getattr__``.
"""
import ast
from pathlib import Path

import pytest

from as2d_core.capabilities import (BeamScoring, Closable, FeatureList, KnownVocabulary, LanguageDetector,
                                    PrefixDrafting, ResponseScores, ScoredSession, TaskList, TimestampVocabulary,
                                    WordAligner)
from as2d_core.contracts import Source, Target, TargetSession
from as2d_core.decode.faults import FaultLandingTarget, FaultySource
from as2d_core.decode.lookahead import LookaheadSource
from as2d_core.decode.wrappers import SessionWrapper, SourceWrapper, TargetWrapper
from as2d_serve.cancel import Cancel, Cancelled
from as2d_serve.service import _CancellableTarget
from tiny_lm import ScriptedSource, TinyLM

ROOT = Path(__file__).resolve().parents[1]
SOURCE_CAPABILITIES = (Source, Closable, TaskList, TimestampVocabulary, PrefixDrafting)
TARGET_CAPABILITIES = (Target, FeatureList, WordAligner, LanguageDetector)
SESSION_CAPABILITIES = (TargetSession, KnownVocabulary, TimestampVocabulary, ScoredSession, ResponseScores,
                        BeamScoring)


class FullSource(ScriptedSource):
    """A source with every optional capability a source may declare."""

    tasks = frozenset({"asr"})
    timestamp_begin, time_precision_s = 50, 0.02

    def __init__(self):
        super().__init__([1, 2, 3], name="full")
        self.closed = 0

    def prefix_session(self, request, language, threads):
        return ("prefix", request, language, threads)

    def close(self):
        self.closed += 1


class FullTarget(TinyLM):
    """A target with every optional capability a target may declare."""

    def __init__(self):
        super().__init__()
        self.features = frozenset({"prompt"})

    def prepare_words(self, threads):
        return "words ready"

    def align_words(self, request, language, tokens, threads):
        return ["aligned"]

    languages = ("en",)

    def language_probabilities(self, request, threads):
        return {"en": 1.0}


class ContractSession:
    """Only the TargetSession contract."""

    language, eos_token, max_new_tokens, cache_length = "en", 0, 8, 3

    def first_token(self):
        return 5

    def verify(self, root, candidates):
        return [root, *candidates]

    def truncate(self, cache_length):
        self.cache_length = cache_length

    def use_threads(self, threads):
        pass

    def decode_text(self, tokens):
        return "text"

    def encode_text(self, text):
        return [1]

    def close(self):
        pass


class FullSession(ContractSession):
    """A session with every optional capability a session may declare."""

    vocab_size, timestamp_begin, time_precision_s = 40, 30, 0.02

    def first_token_confidence(self):
        return 0.9

    def verify_with_confidence(self, root, candidates):
        return [root], [0.9]

    def token_logprobs(self):
        return [-0.1] * (self.cache_length + 1)

    def no_speech_prob(self):
        return 0.25

    def beam_rows(self, width):
        return ("rows", width)


def public(part) -> set[str]:
    return {name for name in dir(part) if not name.startswith("_")}


def capabilities(part, protocols) -> list[bool]:
    return [isinstance(part, p) for p in protocols]


@pytest.mark.parametrize("inner", [FullSource(), ScriptedSource([1, 2])], ids=["every capability", "the contract"])
def test_a_wrapped_source_exposes_exactly_what_its_source_does(inner):
    wrapped = SourceWrapper(inner)
    assert capabilities(wrapped, SOURCE_CAPABILITIES) == capabilities(inner, SOURCE_CAPABILITIES)
    contract = {"name", "vocabulary", "languages", "eos_token", "decode_text", "prepare"}
    optional = {"tasks", "timestamp_begin", "time_precision_s", "prefix_session", "close"}
    assert public(wrapped) == {"inner"} | contract | (optional & public(inner))
    assert (wrapped.name, wrapped.vocabulary, wrapped.languages, wrapped.eos_token) == (
        inner.name, inner.vocabulary, inner.languages, inner.eos_token)
    assert wrapped.decode_text([1, 2]) == inner.decode_text([1, 2])
    if isinstance(inner, FullSource):
        assert wrapped.tasks == inner.tasks and wrapped.timestamp_begin == 50 and wrapped.time_precision_s == 0.02
        assert wrapped.prefix_session("r", "en", 2) == ("prefix", "r", "en", 2)
        wrapped.close()
        assert inner.closed == 1


@pytest.mark.parametrize("inner", [FullSource(), ScriptedSource([1, 2])], ids=["every capability", "the contract"])
def test_lookahead_and_faulty_sources_keep_the_capabilities_of_their_source(inner):
    for wrapped in (LookaheadSource(inner), FaultySource(inner, "raise")):
        assert isinstance(wrapped, SourceWrapper)
        assert capabilities(wrapped, SOURCE_CAPABILITIES) == capabilities(inner, SOURCE_CAPABILITIES)
    garbage_out = FaultySource(inner, "garbage-out", publish_as=TinyLM.vocabulary + "-target")
    assert garbage_out.vocabulary == "tiny-target"  # the one member a fault changes


@pytest.mark.parametrize("inner", [FullTarget(), TinyLM()], ids=["every capability", "the contract"])
def test_a_wrapped_target_exposes_exactly_what_its_target_does(inner, tiny_request):
    for wrapped in (TargetWrapper(inner), FaultLandingTarget(inner, FaultySource(ScriptedSource([1]), "raise")),
                    _CancellableTarget(inner, Cancel())):
        assert capabilities(wrapped, TARGET_CAPABILITIES) == capabilities(inner, TARGET_CAPABILITIES)
        assert (wrapped.name, wrapped.vocabulary, wrapped.device_in_use) == (
            inner.name, inner.vocabulary, inner.device_in_use)
    wrapped = TargetWrapper(inner)
    optional = {"features", "prepare_words", "align_words", "languages", "language_probabilities"}
    assert public(wrapped) == {"inner", "name", "vocabulary", "device_in_use", "prepare"} | (optional & public(inner))
    request = tiny_request(0)
    assert wrapped.prepare(request, 1).first_token() == inner.prepare(request, 1).first_token()
    if isinstance(inner, FullTarget):
        assert wrapped.features == frozenset({"prompt"}) and wrapped.prepare_words(1) == "words ready"
        assert wrapped.align_words(request, "en", [], 1) == ["aligned"]
        assert wrapped.language_probabilities(request, 1) == {"en": 1.0} and wrapped.languages == ("en",)


@pytest.mark.parametrize("inner", [FullSession(), ContractSession()], ids=["every capability", "the contract"])
def test_a_wrapped_session_exposes_exactly_what_its_session_does(inner):
    wrapped = SessionWrapper(inner)
    assert capabilities(wrapped, SESSION_CAPABILITIES) == capabilities(inner, SESSION_CAPABILITIES)
    contract = {"language", "eos_token", "max_new_tokens", "cache_length", "first_token", "verify", "truncate",
                "use_threads", "decode_text", "encode_text", "close"}
    optional = {"vocab_size", "timestamp_begin", "time_precision_s", "first_token_confidence",
                "verify_with_confidence", "token_logprobs", "no_speech_prob", "beam_rows"}
    assert public(wrapped) == {"inner"} | contract | (optional & public(inner))
    assert wrapped.verify(4, [6, 7]) == [4, 6, 7] and wrapped.first_token() == 5
    wrapped.truncate(1)
    assert wrapped.cache_length == inner.cache_length == 1  # read live from the session, not copied
    if isinstance(inner, KnownVocabulary):
        assert wrapped.vocab_size == 40 and wrapped.verify_with_confidence(3, []) == ([3], [0.9])
        assert wrapped.token_logprobs() == [-0.1, -0.1] and wrapped.no_speech_prob() == 0.25
        assert wrapped.beam_rows(3) == ("rows", 3)


def test_the_servers_cancellable_session_checks_the_flag_and_forwards_the_rest(tiny_request):
    cancel = Cancel()
    model = TinyLM()
    session = _CancellableTarget(model, cancel).prepare(tiny_request(0), 1)
    assert isinstance(session, SessionWrapper)
    assert capabilities(session, SESSION_CAPABILITIES) == capabilities(session.inner, SESSION_CAPABILITIES)
    first = session.first_token()
    cancel.set("client gone")
    with pytest.raises(Cancelled, match="client gone"):
        session.verify(first, [])
    assert session.decode_text([first]) == session.inner.decode_text([first])  # no model call: not cancelled
    with pytest.raises(Cancelled, match="client gone"):  # beam search's steps are stopped the same way
        session.beam_rows(2).advance([(0, 0, [first]), (1, 0, [first])])


class _WindowedTiny(TinyLM):
    """The tiny model with a window group whose rows are its own sessions (as a target with a windows graph)."""

    def window_group(self, size, threads):
        model = self

        class Group:
            def prepare(self, request, threads):
                return model.prepare(request, threads)

            def verify_rows(self, rows):
                return [session.verify(root, candidates) for session, root, candidates in rows]

        group = Group()
        group.size = size
        return group


def test_the_servers_cancel_flag_stops_a_files_windows_in_waves_too(tiny_request):
    """On the windows route a file's windows share the group's calls (``input.waves``): its rows are prepared and
    verified through the group, not the target's sessions, and the request's cancel flag stops them as well."""
    cancel = Cancel()
    wrapped = _CancellableTarget(_WindowedTiny(), cancel)
    group = wrapped.window_group(2, 1)
    rows = [group.prepare(tiny_request(i), 1) for i in range(2)]
    firsts = [row.first_token() for row in rows]
    assert group.size == 2 and group.verify_rows([(r, f, []) for r, f in zip(rows, firsts)])
    cancel.set("deadline")
    with pytest.raises(Cancelled, match="deadline"):
        group.verify_rows([(r, f, []) for r, f in zip(rows, firsts)])
    with pytest.raises(Cancelled, match="deadline"):
        group.prepare(tiny_request(3), 1)
    assert not hasattr(_CancellableTarget(TinyLM(), cancel), "window_group")  # none where the target has none


def _defines_getattr(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    return any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in ast.walk(tree))


def test_no_catch_all_getattr_proxy_anywhere():
    packages = ("as2d", "as2d_core", "as2d_bench", "as2d_serve", "as2d_tuning", "tokenizer_bridges", "plugins",
                "scripts", "tests")
    files = [p for package in packages for p in (ROOT / package).rglob("*.py")]
    assert len(files) > 100
    assert [str(p.relative_to(ROOT)) for p in files if _defines_getattr(p)] == []
