"""Bridges are resolved once, when a source and a target are loaded together, never per request."""
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.setup import catalog, plugins
from as2d_bench.runner import Bench
from as2d_tuning.measurement import Measurement
from tiny_lm import ScriptedSource, TinyLM
from tokenizer_bridges import IdentityBridge, TextBridge

MODEL = TinyLM()


def _registry() -> plugins.Registry:
    """The core's two bridges, and a source whose ids cannot be read as text (no bridge reaches the target)."""
    registry = plugins.Registry()
    registry.add("bridge", "as2d.builtins", "identity", IdentityBridge.for_request, {"connects": ()})
    registry.add("bridge", "as2d.builtins", "text", TextBridge.for_request,
                 {"connects": (("*", "*"),), "needs": ("decodes_text", "encodes_text")})
    registry.add("source", "test", "ids-only", lambda options: None, {"vocabulary": "ids-only", "decodes_text": False})
    return registry


def _source(name: str, vocabulary: str, tokens=(5, 6, 7)) -> ScriptedSource:
    source = ScriptedSource(list(tokens), name=name)
    source.vocabulary = vocabulary
    return source


@pytest.fixture
def registry(monkeypatch):
    registry = _registry()
    monkeypatch.setattr(catalog, "load_registry", lambda: registry)
    return registry


def test_the_registered_bridge_is_chosen_for_the_pair(registry):
    assert catalog.resolve_bridge(_source("same", MODEL.vocabulary), MODEL) == IdentityBridge.for_request
    assert catalog.resolve_bridge(_source("words", "words"), MODEL) == TextBridge.for_request


def test_a_pair_no_bridge_connects_fails_when_it_loads_naming_both(registry, tmp_path):
    source = _source("ids-only", "ids-only")
    message = r"no registered bridge carries ids-only \(ids-only\) to tiny-lm \(tiny\)"
    with pytest.raises(LookupError, match=message):
        catalog.resolve_bridge(source, MODEL)
    with pytest.raises(LookupError, match=message):  # before any audio is read
        build_pipeline(MODEL, source, PipelineOptions(method="as2d"), detector=None)
    with pytest.raises(LookupError, match=message):  # before any window runs
        Bench(MODEL, source, DecodeOptions(), ["target-only", "as2d"], tmp_path, progress=False, warmup=False)
    with pytest.raises(LookupError, match=message):
        Measurement(MODEL, {"ids-only": source}, audio=None, language="en", options=DecodeOptions())


def test_a_serial_only_bench_resolves_no_bridge(registry, tmp_path):
    """The serial methods draft in the target's turn and convert nothing: their sources need no bridge."""
    source = _source("ids-only", "ids-only")
    bench = Bench(MODEL, source, DecodeOptions(), ["target-only", "asp"], tmp_path, progress=False, warmup=False)
    assert bench.bridges == {}
    both = Bench(MODEL, _source("words", "words"), DecodeOptions(), ["target-only", "as2d", "asp"], tmp_path,
                 progress=False, warmup=False, serial_source=source)
    assert both.bridges == {"words": TextBridge.for_request}


def test_requests_ask_the_registry_nothing(registry, monkeypatch, tiny_request):
    """Once the pipeline is made, its requests decode with the bridge it resolved, also across vocabularies."""
    source = _source("words", "words", tokens=())
    pipeline = build_pipeline(MODEL, source, PipelineOptions(method="as2d", lookahead=False), detector=None)
    assert pipeline.bridge == TextBridge.for_request

    def no_registry():
        raise AssertionError("the registry was asked during a request")

    monkeypatch.setattr(catalog, "load_registry", no_registry)
    for seed in (0, 1):
        request = tiny_request(seed)
        result = pipeline.decode(request)
        assert result.tokens == run_request(request, MODEL, None, "target-only").tokens
        assert result.source == "words"


def test_the_engine_needs_a_bridge_across_vocabularies(tiny_request):
    """Equal vocabularies need none (ids pass through); across vocabularies the caller passes the one it resolved."""
    request = tiny_request(0)
    reference = run_request(request, MODEL, None, "target-only").tokens
    assert run_request(request, MODEL, _source("same", MODEL.vocabulary, reference[1:]), "as2d").tokens == reference
    with pytest.raises(ValueError, match=r"source words \(words\) needs a bridge to target tiny-lm \(tiny\)"):
        run_request(request, MODEL, _source("words", "words"), "as2d")
    result = run_request(request, MODEL, _source("words", "words"), "as2d", bridge=TextBridge.for_request)
    assert result.tokens == reference
