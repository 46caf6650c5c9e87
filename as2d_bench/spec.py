"""A bench described by names, not model objects: what a worker on another machine builds for itself.

The local run builds its ``Bench`` from the same spec, so a run started locally can be resumed on
Ray (and the other way round): both record the same configuration in ``run.json``.
"""
from __future__ import annotations

from pathlib import Path

import attrs

from as2d_core.setup.build import DEFAULT_SOURCE
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.faults import check_fault
from .folder import ResultsFolder
from .runner import Bench, drafters, methods_of_kind, run_config, run_labels

# The serial methods' default drafter: the first that can score a prefix (capabilities.PrefixDrafting), which
# ``as2d run``'s default (build.DEFAULT_SOURCE, on CTranslate2) cannot.
SERIAL_SOURCE = "whisper-tiny.en"


def default_drafters(named: list[str]) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(as2d methods' sources, serial methods' sources or None for the same): ``named`` ones serve every method;
    without any, the as2d methods draft as ``as2d run`` does and the serial methods with ``SERIAL_SOURCE``."""
    return (tuple(named), None) if named else ((DEFAULT_SOURCE,), (SERIAL_SOURCE,))


@attrs.frozen
class BenchSpec:
    methods: tuple[str, ...]  # expanded (``expand_methods``): target-only first
    target: str
    sources: tuple[str, ...]
    options: DecodeOptions
    target_backend: str | None = None
    source_backend: str | None = None
    save_traces: bool = False
    warmup: bool = True
    fault: str | None = None  # break every drafter this way (as2d_core.decode.faults); answers must stay exact
    detect_language: bool = False  # requests name no language: the target (and a peer) detects it
    repeats: int = 1  # rounds of every method per window; each keeps its median round (``runner.median_round``)
    serial_sources: tuple[str, ...] | None = None  # the serial methods' drafters (None: ``sources``)
    task: str = "asr"  # every request's task and instruction, as a configuration's
    instruction: str | None = None

    @property
    def drafters(self) -> tuple[list[str], list[str]]:
        """The sources the as2d methods and the serial methods run with (none for a kind that is not run)."""
        return drafters(self.methods, self.sources, self.serial_sources)

    @property
    def source_names(self) -> list[str]:
        """Every source the run uses, once (none when no method needs one)."""
        return list(dict.fromkeys(name for names in self.drafters for name in names))

    @property
    def describe(self) -> dict:
        return {"target": self.target, "target_backend": self.target_backend, "source_backend": self.source_backend,
                "fault": self.fault, "detect_language": self.detect_language, "task": self.task,
                "instruction": self.instruction}

    @property
    def cores(self) -> int:
        """The cores one window's methods use at once: the target alone, or the target beside the drafter."""
        o = self.options
        return max(o.target_threads, o.shared_target_threads + o.drafter_threads)

    def folder(self, out_dir: Path) -> ResultsFolder:
        decoupled, serial = self.drafters
        config = run_config(list(self.methods), decoupled, serial, self.options, self.repeats, self.describe)
        return ResultsFolder(Path(out_dir), config, run_labels(self.methods, decoupled, serial), self.save_traces)

    def check_fault(self) -> None:
        """A drafter fault breaks decoupled drafting only; serial methods draft on demand and cannot take one."""
        if self.fault is None:
            return
        check_fault(self.fault)
        serial = [m for m in self.methods if m in methods_of_kind("serial")]
        if serial:
            decoupled = ", ".join(methods_of_kind("published"))
            raise ValueError(f"a drafter fault breaks decoupled drafting only ({decoupled}); "
                             f"drop {', '.join(serial)}")

    def check_names(self) -> None:
        """Every named part is registered here (without loading a model): a typo fails before any work."""
        from as2d_core.setup.plugins import load_registry
        from as2d_core.setup.source_spec import SourceSpec

        registry = load_registry()
        registry.get("target", self.target)
        for name in self.source_names:
            registry.get("source", SourceSpec.parse(name).name)

    def build(self, out_dir: Path, **bench_options) -> Bench:
        """Load the models on this machine and return the bench that runs them.

        A serial method's source that cannot score a prefix fails here, before any window runs.
        """
        from as2d_core.setup.build import build_part, build_source
        from as2d_core.capabilities import PrefixDrafting
        from as2d_core.decode.faults import FaultySource
        from .peers import make_peers

        target = build_part("target", self.target, backend=self.target_backend)
        built = {name: build_source(name, backend=self.source_backend) for name in self.source_names}
        if self.fault is not None:
            built = {name: FaultySource(s, self.fault, publish_as=target.vocabulary) for name, s in built.items()}
        decoupled, serial = ([built[name] for name in names] for names in self.drafters)
        unable = [s.name for s in serial if not isinstance(s, PrefixDrafting)]
        if unable:
            methods = ", ".join(m for m in self.methods if m in methods_of_kind("serial"))
            raise ValueError(f"{', '.join(unable)} cannot score a prefix (PrefixDrafting), which the serial "
                             f"methods {methods} need: drop them from --methods, or name no drafter (no --source, "
                             f"--sources or [source] in --config) and they draft with {SERIAL_SOURCE}")
        peers = make_peers(list(self.methods), self.options.target_threads)
        return Bench(target, decoupled, self.options, list(self.methods), Path(out_dir), self.save_traces, peers,
                     self.warmup, describe=self.describe, detect_language=self.detect_language, repeats=self.repeats,
                     serial_source=serial, task=self.task, instruction=self.instruction, **bench_options)
