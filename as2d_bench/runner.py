"""Runs every method on every window of a manifest with the same options and cores.

Methods are interleaved per window (each window runs all methods back to
back), so slow drifts of the machine touch all methods alike. Target-only
always runs first on each window: it is the reference for ``exact`` and for
slowdown counts.

The methods are the registered ones (``as2d_core.decode.methods``), plus the bench's alias ``sd``
(its four fixed widths, reported as their mean) and the outside peers of the plugins.

Several sources: every source-dependent method (the published ``as2d``, ``as2d-no-bc`` and
the serial ``sd-k*``, ``asp``, ``as2d-no-td``) runs once per source of its
kind: the serial methods may draft with other sources than the as2d methods
(``Bench.serial_source``), as ``as2d bench`` does by default. Its name
in ``results.jsonl``, ``summary.json`` and ``report.md`` is the plain method
name for the first source and ``METHOD@SOURCE`` for every later one (so a
single-source run looks as before); ``target-only`` and the peers run once.
Every row carries ``source``: the source the method was run with (null for
target-only and peers). A window whose language the source does not serve
runs target-only, as the engine does, and its row's ``note`` says so. Serial
methods need ``capabilities.PrefixDrafting``; on a source without one each window
gets an error row instead of a run (``as2d bench`` refuses such a source before it starts).

Every row also carries ``first_publish_s`` (seconds from the start of the
decode clock to the first non-empty published batch, or for serial methods
the end of the first drafting round that proposed something; null when
nothing was published) and ``all_published_s`` (to the producer's final
batch, or the end of the last proposing round for serial methods; null when
there was none), ``e2e_s`` (arrival to final token: both models' preparation plus the decode
clock; a peer's own wall clock from the audio in memory), ``served`` (for a run with a source:
whether it drafted, False when the window's language is one it does not serve) and ``machine``
(where it was measured, see ``machine``).

``Bench.run`` resumes: each window's rows are appended to ``results.jsonl`` as the window finishes,
and windows already complete in the folder are skipped (``folder``). ``window_rows`` is one window,
all methods back to back: the unit a Ray worker runs (``distributed``).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from as2d_core.input.audio import load_audio
from as2d_core.capabilities import PrefixDrafting
from as2d_core.contracts import Request
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.request import run_request
from as2d_core.decode.methods import registered
from as2d_core.decode.words import add_words, prepare_words
from as2d_core.setup.catalog import resolve_bridge
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.peers import Peer
from .folder import ResultsFolder
from .machine import bench_machine, check_one_kind
from .peers import peer_row
from .summary import LABEL_SEP, SD, SD_PARTS, summarize
from .rows import error_row, median_round, result_row, sd_mean_rows
from .traces import build_trace



def bench_methods() -> tuple[str, ...]:
    """The names ``--methods`` takes besides the peers: every registered method, ``sd`` after its parts.

    Outside peers (faster-whisper, ...) come from the plugins (see ``peers``).
    """
    names = list(registered())
    at = max(names.index(part) for part in SD_PARTS) + 1
    return (*names[:at], SD, *names[at:])


def methods_of_kind(proposer: str) -> tuple[str, ...]:
    """The registered methods with this proposer: ``"published"`` (decoupled drafting), ``"serial"`` (drafting
    on demand from the target's prefix) or ``"none"``."""
    return tuple(name for name, method in registered().items() if method.proposer == proposer)


def method_label(method: str, source_name: str | None, first: bool = True) -> str:
    """The bench's name of ``method`` run with a source: plain for the first source, ``METHOD@SOURCE`` after."""
    return method if first or source_name is None else f"{method}{LABEL_SEP}{source_name}"


@attrs.frozen
class Run:
    """One column of the bench: a method, with the source it uses (if any), under its label."""

    label: str
    method: str
    source: object = None

    @property
    def source_name(self) -> str | None:
        return None if self.source is None else self.source.name


def drafters(methods: Iterable[str], sources: Sequence, serial_sources: Sequence | None = None) -> tuple[list, list]:
    """The sources (or their names) that the as2d methods and the serial methods among ``methods`` draft with.

    Serial methods draft with ``serial_sources``, or with ``sources`` when it is None; a kind of
    method that is not run uses none, so a run records only the sources it uses.
    """
    methods = list(methods)
    serial = sources if serial_sources is None else serial_sources
    return ([*sources] if set(methods) & set(methods_of_kind("published")) else [],
            [*serial] if set(methods) & set(methods_of_kind("serial")) else [])


def plan_runs(methods: Iterable[str], sources: Sequence, serial_sources: Sequence | None = None) -> list[Run]:
    """Each source-dependent method once per source of its kind (``drafters``), the others once; method-major order."""
    methods = list(methods)
    decoupled, serial = drafters(methods, sources, serial_sources)
    for group in (decoupled, serial):
        names = [s.name for s in group]
        if len(set(names)) != len(names):
            raise ValueError(f"sources must have distinct names, got {names}")
    runs = []
    serial_methods, decoupled_methods = methods_of_kind("serial"), methods_of_kind("published")
    for method in methods:
        group = serial if method in serial_methods else decoupled if method in decoupled_methods else []
        if group:
            runs += [Run(method_label(method, s.name, i == 0), method, s) for i, s in enumerate(group)]
        else:
            runs.append(Run(method, method))
    return runs


@attrs.frozen
class ManifestRow:
    """One row of a speech manifest (``windows.jsonl``, ``clips.jsonl``): a clip to benchmark, with its language and
    reference text (not ``input.windows.Window``, a cut of one long recording)."""

    id: str
    path: Path
    lang: str | None
    text: str | None = None


def read_manifest(path: str | Path) -> list[ManifestRow]:
    """JSONL rows with id, path (relative to the manifest), lang and optional text."""
    path = Path(path)
    windows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [k for k in ("id", "path") if k not in row]
        if missing:
            raise ValueError(f"{path}:{n}: manifest row lacks {', '.join(missing)}")
        windows.append(ManifestRow(row["id"], (path.parent / row["path"]).resolve(), row.get("lang"), row.get("text")))
    return windows


def expand_methods(names: Iterable[str], peers: Iterable[str] = ()) -> list[str]:
    """The methods to execute: ``sd`` means its four fixed widths; target-only always runs first.
    ``peers``: the outside peers that may be named too (those the installed plugins offer)."""
    names = [n.strip() for n in names if n.strip()]
    known = (*bench_methods(), *peers)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(known)}")
    out = ["target-only"]
    for name in names:
        for m in (SD_PARTS if name == SD else (name,)):
            if m not in out:
                out.append(m)
    return out


def timed_peer(peer: Peer, window: ManifestRow, method: str, audio, reference, detect_language: bool = False) -> dict:
    """A peer's row, with its ``e2e_s`` (audio in memory and models loaded, to its final token) if it gave none."""
    start = time.perf_counter()
    row = peer_row(window, method, peer, audio, reference, detect_language)
    if not row.get("error"):
        row.setdefault("e2e_s", time.perf_counter() - start)
    return row


def run_labels(methods: Iterable[str], source_names: list[str], serial_names: list[str] | None = None) -> list[str]:
    """The bench labels of ``methods`` over sources of these names (what every complete window has a row for)."""
    serial = None if serial_names is None else [_Named(n) for n in serial_names]
    return [run.label for run in plan_runs(methods, [_Named(n) for n in source_names], serial)]


@attrs.frozen
class _Named:
    name: str


@attrs.define
class Bench:
    """Everything one ``as2d bench`` run needs: models, options, methods and where to write.

    ``source`` is one source, a list of sources (source-dependent methods run once per source,
    see the module docstring) or None; ``serial_source`` likewise for the serial methods (None: ``source``).
    ``task`` and ``instruction`` go into every request. ``run`` resumes: windows already complete in ``out_dir``
    are skipped (see ``folder``); ``fresh`` discards them instead. ``describe`` adds what the
    models' objects do not tell (target name, backends) to the configuration recorded in ``run.json``.
    """

    target: object
    source: object
    options: DecodeOptions
    methods: list[str]
    out_dir: Path
    save_traces: bool = False
    peers: dict[str, Peer] = attrs.Factory(dict)  # method -> outside peer (see ``peers``)
    warmup: bool = True
    progress: bool = True
    fresh: bool = False
    pool_machines: bool = False
    describe: dict = attrs.Factory(dict)
    # every method detects the language itself, as a user who names none (the manifest's lang only labels rows)
    detect_language: bool = False
    repeats: int = attrs.field(default=1, validator=attrs.validators.ge(1))  # rounds per window (``median_round``)
    serial_source: object = None
    task: str = "asr"
    instruction: str | None = None
    _warmed: bool = attrs.field(default=False, init=False)
    # each drafting source's bridge to the target (by source name), resolved once when the bench is made
    bridges: dict = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        decoupled, _serial = drafters(self.methods, self.sources, self.serial_sources)
        self.bridges = {source.name: resolve_bridge(source, self.target) for source in decoupled}
        if self.options.word_timestamps:  # a target without an aligner fails here, before any window
            prepare_words(self.target, self.options.target_threads)

    @property
    def sources(self) -> list:
        return _listed(self.source)

    @property
    def serial_sources(self) -> list:
        return self.sources if self.serial_source is None else _listed(self.serial_source)

    @property
    def runs(self) -> list[Run]:
        return plan_runs(self.methods, self.sources, self.serial_sources)

    @property
    def source_names(self) -> list[str]:
        """Every source a run of this bench drafts with, once."""
        return list(dict.fromkeys(run.source_name for run in self.runs if run.source is not None))

    def folder(self) -> ResultsFolder:
        """The results folder of this configuration (building it checks the sources' names are distinct)."""
        config = run_config(self.methods, [s.name for s in self.sources], [s.name for s in self.serial_sources],
                            self.options, self.repeats,
                            {"target": self.target.name, **self.describe})
        return ResultsFolder(self.out_dir, config, [r.label for r in self.runs], self.save_traces)

    def run(self, windows: list[ManifestRow]) -> dict:
        """Every window not yet in ``out_dir``, appended as it finishes; then the outputs from all rows."""
        folder = self.folder()
        done = {r["window"] for r in folder.open(self.fresh)}
        todo = [w for w in windows if w.id not in done]
        timelines = folder.timelines()
        bar = _progress(len(todo) * len(self.runs) * self.repeats, self.progress)
        started = time.perf_counter()
        try:
            for window in todo:
                rows, traces = self.window_rows(window, load_audio(window.path), bar)
                folder.append(rows, traces)
                timelines.update(timelines_of(traces))
        finally:
            bar.close()
        run = {"executor": "local", "windows_run": len(todo), "wall_s": time.perf_counter() - started}
        return write_outputs(folder, self.options, self.source_names, windows, timelines,
                             self.pool_machines, {"run": run})

    def window_rows(self, window: ManifestRow, audio, bar=None) -> tuple[list[dict], list[dict]]:
        """All methods back to back on one window, ``repeats`` rounds: its rows (``sd`` means included) and traces.

        With several rounds each method's row is its median round (``median_round``); every round's trace
        is kept, numbered (``round``), the median one marked (``median_round``).
        """
        bar = bar or _NoBar()
        if self.warmup and not self._warmed:
            self._warm(window, audio)
        request = self._request(window.id, window, audio)
        rounds: dict[str, list[tuple[dict, dict | None]]] = {run.label: [] for run in self.runs}
        for _ in range(self.repeats):
            reference = None
            for run in self.runs:
                bar.set_description(f"{window.id} {run.label}")
                row, trace = self._one(window, run, request, audio, reference), None
                if isinstance(row, DecodeResult):
                    result = row
                    if run.method == "target-only":
                        reference = result
                    row = result_row(window, run.label, result, reference, run.source_name)
                    trace = {**build_trace(window.id, result, run.label), "audio_s": request.duration_s}
                rounds[run.label].append((row, trace))
                bar.update(1)
        kept = [median_round(runs) if self.repeats > 1 else runs[0] for runs in rounds.values()]
        rows = [row for row, _ in kept]
        traces = [trace for _, trace in kept if trace is not None]
        if self.repeats > 1:  # every round's trace: a replay calibrates each on the target-only run just before it
            medians = {id(trace) for trace in traces}
            traces = [{**trace, "round": i, "median_round": id(trace) in medians}
                      for runs in rounds.values() for i, (_, trace) in enumerate(runs) if trace is not None]
        rows += sd_mean_rows(window, rows)
        machine = bench_machine()
        for row in rows:
            row["machine"] = machine
        return rows, traces

    def _one(self, window: ManifestRow, run: Run, request: Request, audio, reference):
        method, label, source = run.method, run.label, run.source_name
        try:
            if method in self.peers:
                return timed_peer(self.peers[method], window, method, audio, reference, self.detect_language)
            kind = registered().get(method)
            if kind is None:
                return error_row(window, label, "peer not configured for this run")
            if kind.takes_turns and run.source is not None and not isinstance(run.source, PrefixDrafting):
                return error_row(window, label, f"source {source} offers no prefix-conditioned session "
                                                f"(PrefixDrafting); serial method {method} cannot run on it",
                                 source)
            result = run_request(request, self.target, run.source, method, self.options,
                                 bridge=self.bridges.get(source))
            return add_words(self.target, request, result, self.options.target_threads)
        except Exception as exc:  # one failing method must not end the benchmark; the row says why
            return error_row(window, label, f"{type(exc).__name__}: {exc}", source)

    def _request(self, request_id: str, window: ManifestRow, audio) -> Request:
        return Request(request_id=request_id, audio=audio, language=None if self.detect_language else window.lang,
                       task=self.task, instruction=self.instruction, **self.options.request_fields())

    def _warm(self, window: ManifestRow, audio) -> None:
        """One untimed pass of every method, so session builds and first-call costs stay off the clock."""
        self._warmed = True
        request = self._request(f"warmup-{window.id}", window, audio)
        for run in self.runs:
            self._one(window, run, request, audio, None)


def run_config(methods: list[str], source_names: list[str], serial_names: list[str], options: DecodeOptions,
               repeats: int, describe: dict) -> dict:
    """What ``run.json`` records: a resumed run must match it (the windows may differ)."""
    decoupled, serial = drafters(methods, source_names, serial_names)
    return {"methods": run_labels(methods, source_names, serial_names), "sources": decoupled,
            "serial_sources": serial, "options": attrs.asdict(options), "repeats": repeats, **describe}


def write_outputs(folder: ResultsFolder, options: DecodeOptions, source_names: list[str], windows: list[ManifestRow],
                  timelines: dict, pool_machines: bool = False, extra: dict | None = None) -> dict:
    """``summary.json``, ``report.md`` and the plots, rebuilt from every row in the folder."""
    from .report import write_report

    rows = folder.rows()
    kinds = check_one_kind(rows, pool_machines)
    summary = summarize(rows)
    summary["options"] = attrs.asdict(options)
    summary["methods_run"] = list(folder.labels)
    summary["sources"] = list(source_names)
    order = {w.id: i for i, w in enumerate(windows)}
    summary["windows"] = sorted(dict.fromkeys(r["window"] for r in rows), key=lambda w: (order.get(w, len(order)), w))
    summary["machines"] = kinds
    summary.update(extra or {})
    (folder.path / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    write_report(folder.path, rows, summary, timelines)
    return summary


def _listed(source) -> list:
    """One source, a list of them or None, as a list."""
    if source is None:
        return []
    return list(source) if isinstance(source, (list, tuple)) else [source]


def timelines_of(traces: list[dict]) -> dict[tuple[str, str], dict]:
    """What the report's timeline needs of each run (kept in memory for every run): its median round's trace."""
    return {(t["window"], t.get("label") or t["method"]):
            {"spans": t["spans"], "decode_s": t["decode_s"], "tokens": len(t["tokens"])}
            for t in traces if t.get("median_round", True)}


class _NoBar:
    def update(self, n):
        pass

    def set_description(self, text):
        pass

    def close(self):
        pass


def _progress(total: int, show: bool):
    """A bar of runs (one method on one window) and their speed, on stderr when it is a terminal."""
    from as2d_core.cli.progress import on_terminal

    if not show or not on_terminal():
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="run", dynamic_ncols=True)
