"""Serial baselines and as2d ablations on TinyLM: every one returns the target's greedy tokens.

Every method runs through ``run_request`` by its registered name (``as2d_core.decode.methods``).
"""
import hashlib

import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.serial import BaselineUnavailable, PrefixDrafter
from tiny_lm import ScriptedSource, SlowTarget, TinyLM

MODEL = TinyLM()


def _confidence(position: int, token: int) -> float:
    """A deterministic stand-in for the drafter's top-token probability."""
    return hashlib.sha256(f"{position}:{token}".encode()).digest()[0] / 255


class NoisyDrafterSession:
    """A prefix-conditioned drafter: the target's own greedy path, wrong at some positions.

    The errors depend only on the position, so the drafter is a fixed function
    of its prefix, like a real model, and drafts are partly accepted.
    """

    def __init__(self, inner, every: int, salt: int):
        self.inner, self.every, self.salt = inner, every, salt
        self.eos_token = inner.eos_token
        self.max_new_tokens = inner.max_new_tokens
        self.language = inner.language

    @property
    def cache_length(self):
        return self.inner.cache_length

    def _noisy(self, position: int, token: int) -> int:
        if self.every and (position * 31 + self.salt) % self.every == 0:
            return 2 + (token + 5) % (MODEL.vocab - 2)
        return token

    def first_token(self):
        return self._noisy(0, self.inner.first_token())

    def first_token_confidence(self):
        return _confidence(0, self.first_token())

    def verify_with_confidence(self, root, candidates):
        start = self.cache_length + 1
        tokens = [self._noisy(start + i, t) for i, t in enumerate(self.inner.verify(root, candidates))]
        return tokens, [_confidence(start + i, t) for i, t in enumerate(tokens)]

    def verify(self, root, candidates):
        return self.verify_with_confidence(root, candidates)[0]

    def truncate(self, n):
        self.inner.truncate(n)

    def decode_text(self, tokens):
        return self.inner.decode_text(tokens)

    def encode_text(self, text):
        return self.inner.encode_text(text)

    def use_threads(self, threads):
        pass

    def close(self):
        pass


class ScriptedPrefixSession(NoisyDrafterSession):
    """A drafter whose prediction depends on the position only, as if read off the audio.

    After a substitution its old draft is still right one position on: what recycling exploits.
    """

    def __init__(self, inner, script, every, salt):
        super().__init__(inner, every, salt)
        self.script, self.length = list(script), 0

    @property
    def cache_length(self):
        return self.length

    def _at(self, position):
        token = self.script[position] if position < len(self.script) else self.eos_token
        return self._noisy(position, token)

    def first_token(self):
        return self._at(0)

    def verify_with_confidence(self, root, candidates):
        start = self.length + 1
        self.length += 1 + len(candidates)
        tokens = [self._at(start + i) for i in range(len(candidates) + 1)]
        return tokens, [_confidence(start + i, t) for i, t in enumerate(tokens)]

    def truncate(self, n):
        self.length = n


class PlainSession:
    """Only the TargetSession contract: a drafter that reports no probabilities."""

    def __init__(self, inner):
        self._inner = inner
        self.eos_token, self.max_new_tokens, self.language = inner.eos_token, inner.max_new_tokens, inner.language

    @property
    def cache_length(self):
        return self._inner.cache_length

    def first_token(self):
        return self._inner.first_token()

    def verify(self, root, candidates):
        return self._inner.verify(root, candidates)

    def truncate(self, cache_length):
        self._inner.truncate(cache_length)

    def use_threads(self, threads):
        self._inner.use_threads(threads)

    def decode_text(self, tokens):
        return self._inner.decode_text(tokens)

    def encode_text(self, text):
        return self._inner.encode_text(text)

    def close(self):
        self._inner.close()


class PrefixSource(ScriptedSource):
    """A source that drafts from the audio (scripted) and offers a prefix-conditioned session."""

    def __init__(self, tokens=(), every=4, salt=0, vocabulary="tiny", confident=True, positional=False):
        super().__init__(list(tokens), name="prefix-drafter")
        self.vocabulary = vocabulary
        self.every, self.salt, self.confident, self.positional = every, salt, confident, positional

    def prefix_session(self, request, language, threads):
        inner = MODEL.prepare(request, threads)
        if self.positional:
            session = ScriptedPrefixSession(inner, reference(request), self.every, self.salt)
        else:
            session = NoisyDrafterSession(inner, self.every, self.salt)
        return session if self.confident else PlainSession(session)


def reference(request):
    return run_request(request, MODEL, None, "target-only").tokens


# each serial method with its proposals per round (as2d-no-td: the request's budget, 7 here)
SERIAL = {"sd-k5": 4, "sd-k6": 5, "sd-k7": 6, "sd-k8": 7, "asp": 24, "as2d-no-td": 7}


def serial(request, source, method, **options):
    return run_request(request, MODEL, source, method, DecodeOptions(**options))


@pytest.mark.parametrize("method", SERIAL)
@pytest.mark.parametrize("vocabulary", ["tiny", "tiny-text"])  # same ids, or through text
@pytest.mark.parametrize("every", [0, 3, 7])
@pytest.mark.parametrize("positional", [False, True])
def test_serial_baselines_are_exact(tiny_request, method, vocabulary, every, positional):
    for seed in range(3):
        request = tiny_request(seed)
        ref = reference(request)
        source = PrefixSource(every=every, salt=seed, vocabulary=vocabulary, positional=positional)
        result = serial(request, source, method, budget=7)
        assert result.tokens == ref
        assert result.method == method and result.budget == SERIAL[method]
        assert result.decomposition.check()
        assert all(w <= SERIAL[method] + 1 for w in result.verify_widths)
        if every == 0:  # a perfect drafter: everything proposed is accepted
            assert result.accepted == result.proposed > 0


def test_fixed_sd_uses_fixed_width(tiny_request):
    request = tiny_request(1)
    result = serial(request, PrefixSource(every=0), "sd-k6")
    assert result.verify_widths[:-1] == [6] * (len(result.verify_widths) - 1)
    assert result.verify_calls == -(-(len(result.tokens) - 1) // 6) or result.verify_calls > 0


def test_asp_stops_at_low_confidence_and_recycles(tiny_request):
    request = tiny_request(2)
    ref = reference(request)
    source = PrefixSource(every=5, salt=1)
    result = serial(request, source, "asp")
    assert result.tokens == ref
    drafts = [t for t in result.trace if t["kind"] == "draft"]
    # Some round ended early on a low-confidence token, well before the cap of 24.
    assert min(d["drafted"] for d in drafts) < 24
    assert max(result.verify_widths) <= 25


def test_asp_recycling_reuses_old_drafts(tiny_request):
    request = tiny_request(3)
    ref = reference(request)
    target = MODEL.prepare(request, 1)
    source = PrefixSource(every=6, salt=2, positional=True)
    drafter = PrefixDrafter(source.prefix_session(request, "en", 1), target, True)
    committed = [target.first_token()]
    while len(committed) < len(ref):
        context = drafter.context(committed)
        drafted = drafter.draft(context, 24, None, recycle=True)
        i = 0
        while i < len(drafted) and len(committed) + i < len(ref) and drafted[i] == ref[len(committed) + i]:
            i += 1
        committed = ref[: len(committed) + i + 1]
    assert drafter.recycled > 0
    # and the serial ASP loop with that drafter is still exact
    assert serial(request, source, "asp").tokens == ref


def test_drafter_without_confidences_drafts_to_the_cap(tiny_request):
    request = tiny_request(4)
    result = serial(request, PrefixSource(every=0, confident=False), "asp")
    assert result.tokens == reference(request)
    assert max(result.verify_widths) == 25 or result.verify_calls <= 2


def test_source_without_prefix_session_is_refused(tiny_request):
    with pytest.raises(BaselineUnavailable, match="PrefixDrafting"):
        serial(tiny_request(0), ScriptedSource([3, 4]), "sd-k5")


def test_language_not_served_runs_target_only(tiny_request):
    source = PrefixSource()
    source.languages = frozenset({"de"})
    request = tiny_request(5)
    result = serial(request, source, "sd-k5")
    assert result.tokens == reference(request)
    assert result.verify_calls == 0 and "does not draft" in result.note


@pytest.mark.parametrize("threshold", [0.0, 0.4, 1.01])
def test_as2d_confidence_stop_is_exact_and_cuts_candidates(tiny_request, threshold):
    """as2d-no-bc: decoupled drafting with SpecASR's threshold and cap."""
    request = tiny_request(1)
    ref = reference(request)
    source = ScriptedSource(ref)  # confidences 0.5 on every published token
    options = DecodeOptions(budget=24, publication_size=4, confidence_stop=threshold)
    result = run_request(request, SlowTarget(), source, "as2d", options)
    assert result.tokens == ref
    assert result.decomposition.check()
    assert result.verify_calls > 0
    if threshold > 0.5:  # every token is below the threshold: one candidate per call
        assert max(result.verify_widths) == 2
    else:
        assert max(result.verify_widths) > 2
