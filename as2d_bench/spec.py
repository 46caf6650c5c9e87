"""A bench described by names, not model objects: what a worker on another machine builds for itself.

The local run builds its ``Bench`` from the same spec, so a run started locally can be resumed on
Ray (and the other way round): both record the same configuration in ``run.json``.
"""
from __future__ import annotations

from pathlib import Path

import attrs

from as2d_core.engine import DecodeOptions
from as2d_core.faults import check_fault
from .folder import ResultsFolder
from .runner import SOURCE_METHODS, Bench, run_config, run_labels

FAULTABLE_METHODS = ("as2d", "as2d-prepared", "as2d-no-bc")  # decoupled drafting; serial methods draft on demand


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
    fault: str | None = None  # break every drafter this way (as2d_core.faults); answers must stay exact
    detect_language: bool = False  # requests name no language: the target (and a peer) detects it
    repeats: int = 1  # rounds of every method per window; each keeps its median round (``runner.median_round``)

    @property
    def source_names(self) -> list[str]:
        """The sources the run uses (none when no method needs one)."""
        return list(self.sources) if any(m in SOURCE_METHODS for m in self.methods) else []

    @property
    def describe(self) -> dict:
        return {"target": self.target, "target_backend": self.target_backend, "source_backend": self.source_backend,
                "fault": self.fault, "detect_language": self.detect_language}

    @property
    def cores(self) -> int:
        """The cores one window's methods use at once: the target alone, or the target beside the drafter."""
        o = self.options
        return max(o.target_threads, o.shared_target_threads + o.drafter_threads)

    def folder(self, out_dir: Path) -> ResultsFolder:
        config = run_config(list(self.methods), self.source_names, self.options, self.repeats, self.describe)
        return ResultsFolder(Path(out_dir), config, run_labels(self.methods, self.source_names), self.save_traces)

    def check_fault(self) -> None:
        """A drafter fault breaks decoupled drafting only; serial methods draft on demand and cannot take one."""
        if self.fault is None:
            return
        check_fault(self.fault)
        serial = [m for m in self.methods if m in SOURCE_METHODS and m not in FAULTABLE_METHODS]
        if serial:
            raise ValueError(f"a drafter fault breaks decoupled drafting only ({', '.join(FAULTABLE_METHODS)}); "
                             f"drop {', '.join(serial)}")

    def check_names(self) -> None:
        """Every named part is registered here (without loading a model): a typo fails before any work."""
        from as2d_core.build import PROCESS_SUFFIX
        from as2d_core.plugins import load_registry

        registry = load_registry()
        registry.get("target", self.target)
        for name in self.source_names:
            registry.get("source", name.removesuffix(PROCESS_SUFFIX))

    def build(self, out_dir: Path, **bench_options) -> Bench:
        """Load the models on this machine and return the bench that runs them."""
        from as2d_core.build import build_part, build_source
        from as2d_core.faults import FaultySource
        from .peers import make_peers

        target = build_part("target", self.target, backend=self.target_backend)
        sources = [build_source(name, backend=self.source_backend) for name in self.source_names]
        if self.fault is not None:
            sources = [FaultySource(s, self.fault, publish_as=target.vocabulary) for s in sources]
        peers = make_peers(list(self.methods), self.options.target_threads)
        return Bench(target, sources, self.options, list(self.methods), Path(out_dir), self.save_traces, peers,
                     self.warmup, describe=self.describe, detect_language=self.detect_language, repeats=self.repeats,
                     **bench_options)
