"""Decoding methods: each one a registered :class:`Method` that says how ``run_request`` proposes candidates
(its proposer kind, one file each in ``decode.kinds``).

Every method verifies and commits in the same ``target_loop``, so every one returns exactly the
target's greedy tokens; they differ only in where candidates come from:

- ``"published"``: the as2d producer thread drafts over the request, target-decoupled, and publishes
  batches into a buffer the target reads (``proposers.PublishedProposer``);
- ``"serial"``: a prefix-conditioned drafter drafts on demand from the committed prefix, taking turns
  with the target (``serial.SerialProposer``, under the method's :class:`serial.SerialPolicy`);
- ``"none"``: target-only greedy decoding, the reference.

A method may also override decoding options (``as2d-prepared`` starts the drafter after both models
are prepared) and says how ``as2d tune replay`` prices its traces and how the bench report names it.

Adding a method: declare a ``Method`` in one file and register it through the ``register_methods``
hook (``setup.hookspecs``), as a plugin does::

    from as2d_core.decode.methods import Method
    from as2d_core.decode.serial import SerialPolicy
    from as2d_core.setup.hookspecs import hookimpl

    @hookimpl
    def register_methods(register):
        register(Method("sd-k4", "serial", "standard SD, width 4", serial=SerialPolicy(3)))

Then ``run_request(..., method="sd-k4")``, ``as2d run --method sd-k4`` and ``as2d bench --methods sd-k4``
run it. The built-in methods below are registered the same way (``setup.builtins``). Decoding knows the
built-ins by itself; the plugins' come from the registry, which hands them down when ``setup.plugins``
is imported (``take_registered``): a program that never imports it knows the built-ins only.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.serial import SerialPolicy

PROPOSERS = ("published", "serial", "none")
PRICINGS = ("published", "serial", "target-only")  # replay: re-run on priced records / as traced / target alone
_PRICING = {"published": "published", "serial": "serial", "none": "target-only"}

# SpecASR's constants (Appendix D.1.3): its confidence threshold and proposal cap (physical width at most 25).
SPECASR_THRESHOLD = 0.4
SPECASR_CAP = 24


class UnknownMethod(ValueError):
    """A method name nobody registered; the message lists the registered ones."""


def _overrides(value: Mapping) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(dict(value).items()))


def _known_options(instance, attribute, value) -> None:
    fields = attrs.fields_dict(DecodeOptions)
    unknown = [key for key, _ in value if key not in fields]
    if unknown:
        raise ValueError(f"method {instance.name!r} overrides unknown decoding options {unknown}")


def _policy_iff_serial(instance, attribute, value) -> None:
    if (value is not None) != (instance.proposer == "serial"):
        raise ValueError(f"method {instance.name!r}: a serial policy goes with the serial proposer, and only with it")


@attrs.frozen
class Method:
    """One decoding method: its proposer, the options it fixes, and how replay and the report treat it."""

    name: str
    proposer: str = attrs.field(validator=attrs.validators.in_(PROPOSERS))
    description: str = ""  # one line for the bench report and listings
    # DecodeOptions fields this method sets over the caller's (``{"start": "prepared"}``)
    overrides: tuple[tuple[str, object], ...] = attrs.field(default=(), converter=_overrides,
                                                            validator=_known_options)
    serial: SerialPolicy | None = attrs.field(default=None, validator=_policy_iff_serial)
    # how ``as2d tune replay`` prices a trace of it (see ``PRICINGS``); by default what its proposer implies
    pricing: str = attrs.field(default=attrs.Factory(lambda self: _PRICING[self.proposer], takes_self=True),
                               validator=attrs.validators.in_(PRICINGS))
    timeline: bool = False  # one of the methods drawn in the bench report's timeline (one of each kind)

    @property
    def needs_source(self) -> bool:
        """Whether it drafts: a method with a proposer needs a source."""
        return self.proposer != "none"

    @property
    def publishes(self) -> bool:
        """Whether its drafter runs apart from the target and publishes (as2d): it can draft a window ahead."""
        return self.proposer == "published"

    @property
    def takes_turns(self) -> bool:
        """Whether its drafter drafts from the target's committed prefix, in turns with it (serial SD)."""
        return self.proposer == "serial"

    def override(self, name: str, default=None):
        """The value this method fixes for the option ``name``, else ``default``."""
        return dict(self.overrides).get(name, default)

    def options(self, options: DecodeOptions) -> DecodeOptions:
        """The caller's options with this method's overrides."""
        return attrs.evolve(options, **dict(self.overrides)) if self.overrides else options


SD_METHODS = tuple(Method(f"sd-k{k}", "serial", f"standard speculative decoding, verification width K={k}",
                          serial=SerialPolicy(k - 1), timeline=k == 6) for k in (5, 6, 7, 8))

BUILTIN = (
    Method("target-only", "none", "the target alone, greedy: the reference every method must equal"),
    *SD_METHODS,
    Method("asp", "serial", "SpecASR: adaptive single-sequence drafts with recycling, stop below confidence 0.4",
           serial=SerialPolicy(SPECASR_CAP, SPECASR_THRESHOLD, recycle=True), timeline=True),
    Method("as2d", "published", "as2d: target-decoupled drafting from the audio, drafter starts at arrival",
           timeline=True),
    Method("as2d-prepared", "published", "as2d with the drafter started after both models are prepared (the paper's)",
           overrides={"start": "prepared"}),
    Method("as2d-no-td", "serial", "as2d without target-decoupled drafting: the same budget, drafted serially",
           serial=SerialPolicy(None), timeline=True),
    Method("as2d-no-bc", "published", "as2d without budget configuration: SpecASR's confidence stop and cap",
           overrides={"budget": SPECASR_CAP, "confidence_stop": SPECASR_THRESHOLD}),
)
_BUILTIN = {method.name: method for method in BUILTIN}

# Where the plugins' methods come from: the plugin registry hands them down (``setup.plugins`` calls
# ``take_registered`` when it is imported), so decoding never reaches up to the registry. Before that,
# only the built-ins are known.
_plugged: Callable[[], Mapping[str, Method]] | None = None


def take_registered(provider: Callable[[], Mapping[str, Method]]) -> None:
    """Let ``provider()`` name the registered methods (the plugin registry's, built-ins included) from now on."""
    global _plugged
    _plugged = provider


def registered() -> dict[str, Method]:
    """Every registered method by name: the built-in ones in their order, then the plugins' by name."""
    return {**_BUILTIN, **(_plugged() if _plugged is not None else {})}


def method_names() -> tuple[str, ...]:
    return tuple(registered())


def get_method(method: str | Method) -> Method:
    """The method of this name (a :class:`Method` passes through); an unknown name lists the known ones."""
    if isinstance(method, Method):
        return method
    if method in _BUILTIN:  # without loading the plugins
        return _BUILTIN[method]
    known = registered()
    if method not in known:
        raise UnknownMethod(f"unknown method {method!r}; choose one of {', '.join(known)}")
    return known[method]
