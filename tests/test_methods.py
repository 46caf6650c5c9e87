"""The method registry: built-in methods by name, a plugin's method through the hook, and clear refusals."""
import types

import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.methods import BUILTIN, Method, UnknownMethod, get_method, method_names
from as2d_core.decode.serial import SerialPolicy
from as2d_core.setup import plugins
from as2d_core.setup.hookspecs import hookimpl
from test_baselines import MODEL, PrefixSource, reference
from tiny_lm import ScriptedSource, SlowTarget

PLUGIN = "toy-methods"


def _toy_plugin() -> types.ModuleType:
    """A plugin module that adds two methods: a narrow serial SD and as2d at budget 3."""
    module = types.ModuleType("toy_methods")

    @hookimpl
    def register_methods(register):
        register(Method("sd-k3", "serial", "standard SD, width 3", serial=SerialPolicy(2)))
        register(Method("as2d-b3", "published", "as2d at budget 3", overrides={"budget": 3}))

    module.register_methods = register_methods
    return module


@pytest.fixture
def toy_registry(monkeypatch):
    """The registry with only the built-ins and the toy plugin, loaded through the entry points."""
    module = _toy_plugin()
    monkeypatch.setattr(plugins.metadata, "entry_points", lambda group: [
        types.SimpleNamespace(name=PLUGIN, load=lambda: module, dist=None)])
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, PLUGIN)
    yield plugins.load_registry(refresh=True)
    plugins._REGISTRY = None


def test_plugin_methods_run_through_run_request(toy_registry, tiny_request):
    assert "method:sd-k3" in next(p for p in toy_registry.plugins if p["name"] == PLUGIN)["parts"]
    assert method_names()[: len(BUILTIN)] == tuple(m.name for m in BUILTIN)  # the built-ins first, in their order
    assert {"sd-k3", "as2d-b3"} <= set(method_names())
    request = tiny_request(2)
    ref = reference(request)
    sd = run_request(request, MODEL, PrefixSource(every=3), "sd-k3")
    assert sd.tokens == ref and sd.method == "sd-k3" and sd.budget == 2
    assert sd.verify_calls > 0 and max(sd.verify_widths) <= 3
    as2d = run_request(request, SlowTarget(), ScriptedSource(ref), "as2d-b3", DecodeOptions(budget=9))
    assert as2d.tokens == ref and as2d.method == "as2d-b3" and as2d.budget == 3  # the method's override wins
    assert max(as2d.verify_widths) <= 4


def test_plugin_method_in_bench_names(toy_registry):
    from as2d_bench.runner import bench_methods, expand_methods, methods_of_kind

    assert "sd-k3" in bench_methods() and "sd-k3" in methods_of_kind("serial")
    assert "as2d-b3" in methods_of_kind("published")
    assert expand_methods(["sd", "sd-k3"]) == ["target-only", "sd-k5", "sd-k6", "sd-k7", "sd-k8", "sd-k3"]


def test_unknown_method_lists_the_registered_ones(tiny_request):
    with pytest.raises(UnknownMethod, match=r"unknown method 'sd-k99'; choose one of target-only, sd-k5, .*as2d-no-bc"):
        run_request(tiny_request(0), MODEL, None, "sd-k99")
    with pytest.raises(ValueError, match="'as2d-prepared' needs a source"):
        run_request(tiny_request(0), MODEL, None, "as2d-prepared")


def test_builtin_overrides_apply(tiny_request):
    request = tiny_request(1)
    ref = reference(request)
    options = DecodeOptions(budget=5, publication_size=4)
    prepared = run_request(request, SlowTarget(), ScriptedSource(ref), "as2d-prepared", options)
    assert prepared.tokens == ref and prepared.method == "as2d-prepared" and prepared.start == "prepared"
    no_bc = run_request(request, SlowTarget(), ScriptedSource(ref), "as2d-no-bc", options)
    assert no_bc.tokens == ref and no_bc.method == "as2d-no-bc" and no_bc.budget == 24
    assert get_method("as2d-no-bc").override("confidence_stop") == get_method("asp").serial.threshold == 0.4


def test_method_declarations_are_checked():
    with pytest.raises(ValueError, match="serial policy"):
        Method("bad", "serial")
    with pytest.raises(ValueError, match="serial policy"):
        Method("bad", "published", serial=SerialPolicy(3))
    with pytest.raises(ValueError, match="unknown decoding options"):
        Method("bad", "published", overrides={"budgett": 3})
    assert Method("x", "none").pricing == "target-only" and Method("y", "published").pricing == "published"
