"""A bench results folder that survives interruption: ``run.json``, ``results.jsonl``, ``traces.jsonl``.

Each finished window's rows (and traces) are appended and flushed together, so a run that stops
loses at most the window in progress. Running the same command again keeps every complete window
(one row per run label) and drops a torn tail; ``run.json`` records the configuration, and a
different one is refused rather than mixed into the same rows (unless the caller starts afresh).

A SIGINT or SIGTERM that arrives while a window is written takes effect right after, so the files stay
whole; ``says_how_to_resume`` tells the user who stopped a command how to go on.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
from pathlib import Path

import attrs

RUN_FILE = "run.json"
RESULTS = "results.jsonl"
TRACES = "traces.jsonl"
FORMAT = "as2d-bench-run/1"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ConfigMismatch(ValueError):
    """The folder holds rows of a run configured differently."""


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM while a window is written; the handler they find (``as2d``'s, which stops
    the command, or Python's) acts on them as soon as the write is whole."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    held: list[int] = []
    previous = {number: signal.signal(number, lambda n, _frame: held.append(n)) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if held:
            signal.raise_signal(held[0])


def says_how_to_resume(command):
    """Wrap a command that fills a ``ResultsFolder`` at ``out_dir``: when a signal (or Ctrl-C) stops it,
    it says on the way out that the same command resumes."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except BaseException as exc:
            if not isinstance(exc, (Exception, SystemExit)):  # Ctrl-C, or the stop ``as2d`` raises on a signal
                out = kwargs.get("out_dir")
                print(f"{out / RESULTS if out else RESULTS} keeps every finished window; "
                      "run the same command again to resume.", file=sys.stderr)
            raise

    return wrapper


def read_jsonl(path: Path) -> list[dict]:
    """Every complete JSON line; a line cut short by an interruption is skipped."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    tmp.replace(path)


def _append_durably(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _flat(config: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _differences(old: dict, new: dict) -> list[str]:
    old, new = _flat(old), _flat(new)
    return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


@attrs.define
class ResultsFolder:
    """The rows of one bench configuration; ``labels`` are the runs every complete window has a row for."""

    path: Path
    config: dict
    labels: list[str]
    save_traces: bool = False

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def traces(self) -> Path:
        return self.path / TRACES

    def open(self, fresh: bool = False) -> list[dict]:
        """Check or record the configuration; return the rows of the windows already complete."""
        self.path.mkdir(parents=True, exist_ok=True)
        run_file = self.path / RUN_FILE
        config = {"format": FORMAT, **json.loads(json.dumps(self.config))}  # as it reads back
        if fresh:
            for f in (self.results, self.traces, run_file):
                f.unlink(missing_ok=True)
        if run_file.is_file() and read_jsonl(self.results):  # a configuration without rows binds nothing
            old = json.loads(run_file.read_text())
            changed = _differences(old, config)
            if changed:
                raise ConfigMismatch(f"{self.path} holds a run configured differently ({'; '.join(changed)}); "
                                     "use another --out, the same options, or --fresh to discard its results")
        elif self.results.is_file():
            raise ConfigMismatch(f"{self.path} holds results without {RUN_FILE} (an older or foreign run); "
                                 "use another --out or --fresh to discard them")
        run_file.write_text(json.dumps(config, indent=1))
        rows = read_jsonl(self.results)
        done = self._complete(rows)
        kept = [r for r in rows if r["window"] in done]
        if len(kept) != len(rows) or (self.results.is_file() and not self.results.read_text().endswith("\n")
                                      and self.results.stat().st_size):
            _write_jsonl(self.results, kept)  # drop a torn window before appending after it
        if self.traces.is_file():  # traces of a torn window go too
            _write_jsonl(self.traces, [t for t in read_jsonl(self.traces) if t.get("window") in done])
        return kept

    def _complete(self, rows: list[dict]) -> set[str]:
        seen: dict[str, set] = {}
        for r in rows:
            if not r.get("derived"):
                seen.setdefault(r["window"], set()).add(r["method"])
        wanted = set(self.labels)
        return {w for w, labels in seen.items() if wanted <= labels}

    def append(self, rows: list[dict], traces: list[dict]) -> None:
        """One finished window: its traces, then its rows, each in one write, on disk before a stop signal acts."""
        with _signals_held():
            if self.save_traces and traces:
                _append_durably(self.traces, "".join(json.dumps(t) + "\n" for t in traces))
            _append_durably(self.results, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    def rows(self) -> list[dict]:
        return read_jsonl(self.results)

    def timelines(self) -> dict[tuple[str, str], dict]:
        """What the report's timeline needs, from the saved traces (empty without --save-traces)."""
        from .runner import timelines_of

        return timelines_of(read_jsonl(self.traces))
