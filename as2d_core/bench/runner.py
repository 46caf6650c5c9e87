"""Runs every method on every window of a manifest with the same options and cores.

Methods are interleaved per window (each window runs all methods back to
back), so slow drifts of the machine touch all methods alike. Target-only
always runs first on each window: it is the reference for ``exact`` and for
slowdown counts.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from statistics import mean

import attrs

from ..audio import load_audio
from ..contracts import Request
from ..engine import DecodeOptions, DecodeResult, run_request
from .baselines import asp_policy, no_td_policy, sd_policy, serial_decode
from .summary import SD_PARTS, summarize

PEERS = ("faster-whisper", "hf-assisted")
METHODS = ("target-only", *SD_PARTS, "sd", "asp", "as2d", "as2d-no-td", "as2d-no-bc", *PEERS)
NO_BC_THRESHOLD = 0.4
NO_BC_CAP = 24


@attrs.frozen
class Window:
    id: str
    path: Path
    lang: str | None
    text: str | None = None


def read_manifest(path: str | Path) -> list[Window]:
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
        windows.append(Window(row["id"], (path.parent / row["path"]).resolve(), row.get("lang"), row.get("text")))
    return windows


def expand_methods(names: Iterable[str]) -> list[str]:
    """The methods to execute: ``sd`` means its four fixed widths; target-only always runs first."""
    names = [n.strip() for n in names if n.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    out = ["target-only"]
    for name in names:
        for m in (SD_PARTS if name == "sd" else (name,)):
            if m not in out:
                out.append(m)
    return out


def run_method(method: str, request: Request, target, source, options: DecodeOptions) -> DecodeResult:
    """One decode of ``request`` by an engine or serial method (peers run elsewhere)."""
    if method == "target-only":
        return run_request(request, target, None, "target-only", options)
    if method == "as2d":
        return run_request(request, target, source, "as2d", options)
    if method == "as2d-no-bc":
        no_bc = attrs.evolve(options, budget=NO_BC_CAP, confidence_stop=NO_BC_THRESHOLD)
        result = run_request(request, target, source, "as2d", no_bc)
        result.method = method
        return result
    if method in SD_PARTS:
        return serial_decode(request, target, source, sd_policy(int(method[4:])), options)
    if method == "asp":
        return serial_decode(request, target, source, asp_policy(), options)
    if method == "as2d-no-td":
        return serial_decode(request, target, source, no_td_policy(options.budget), options)
    raise ValueError(f"{method} is not an engine method")


def result_row(window: Window, method: str, result: DecodeResult, reference: DecodeResult | None) -> dict:
    d = result.decomposition
    row = {
        "window": window.id,
        "lang": result.language,
        "method": method,
        "tokens": len(result.tokens),
        "decode_s": result.decode_s,
        "tps": result.tps,
        "exact": (result.tokens == reference.tokens) if reference is not None else True,
        "proposed": result.proposed,
        "accepted": result.accepted,
        "verify_calls": result.verify_calls,
        "verify_widths": result.verify_widths,
        "target_only_steps": result.target_only_steps,
        "prepare_s": result.prepare_s,
        "drain_s": result.drain_s,
        "source": result.source,
        "budget": result.budget,
        "note": result.note,
        "producer_error": result.producer_error,
        "text": result.text,
    }
    if d is not None:
        row["decomposition"] = {"T": d.total, "D": d.drafting, "V": d.verification, "O": d.overlap, "H": d.residual}
        row["decomposition_ok"] = d.check()
    return row


def error_row(window: Window, method: str, message: str) -> dict:
    return {"window": window.id, "lang": window.lang, "method": method, "tokens": 0, "decode_s": 0.0,
            "tps": 0.0, "exact": None, "error": message}


def sd_mean_row(window: Window, rows: list[dict]) -> dict | None:
    """The derived ``sd`` row of one window: the mean TPS of its four fixed-K rows (Appendix D.4)."""
    parts = [r for r in rows if r["method"] in SD_PARTS and not r.get("error")]
    if len(parts) != len(SD_PARTS):
        return None
    return {"window": window.id, "lang": parts[0]["lang"], "method": "sd", "derived": True, "of": list(SD_PARTS),
            "tokens": parts[0]["tokens"], "tps": mean(r["tps"] for r in parts),
            "exact": all(r["exact"] for r in parts)}


@attrs.define
class Bench:
    """Everything one ``as2d bench`` run needs: models, options, methods and where to write."""

    target: object
    source: object
    options: DecodeOptions
    methods: list[str]
    out_dir: Path
    save_traces: bool = False
    peers: dict[str, Callable] = attrs.Factory(dict)  # method -> fn(window, audio, reference) -> row dict
    warmup: bool = True
    progress: bool = True

    def run(self, windows: list[Window]) -> dict:
        from .report import write_report
        from .traces import build_trace

        self.out_dir.mkdir(parents=True, exist_ok=True)
        rows: list[dict] = []
        traces: dict[tuple[str, str], dict] = {}
        trace_file = (self.out_dir / "traces.jsonl").open("w") if self.save_traces else None
        if self.warmup and windows:
            self._warm(windows[0])
        bar = _progress(len(windows) * len(self.methods), self.progress)
        try:
            with (self.out_dir / "results.jsonl").open("w") as results:
                for window in windows:
                    window_rows = []
                    audio = load_audio(window.path)
                    request = Request(request_id=window.id, audio=audio, language=window.lang)
                    reference = None
                    for method in self.methods:
                        bar.set_description(f"{window.id} {method}")
                        row = self._one(window, method, request, audio, reference)
                        if isinstance(row, DecodeResult):
                            result = row
                            if method == "target-only":
                                reference = result
                            row = result_row(window, method, result, reference)
                            trace = build_trace(window.id, result)
                            traces[(window.id, method)] = _timeline_only(trace)
                            if trace_file is not None:
                                trace_file.write(json.dumps(trace) + "\n")
                        window_rows.append(row)
                        bar.update(1)
                    derived = sd_mean_row(window, window_rows)
                    if derived is not None:
                        window_rows.append(derived)
                    for row in window_rows:
                        results.write(json.dumps(row, ensure_ascii=False) + "\n")
                    results.flush()
                    rows.extend(window_rows)
        finally:
            bar.close()
            if trace_file is not None:
                trace_file.close()
        summary = summarize(rows)
        summary["options"] = attrs.asdict(self.options)
        summary["methods_run"] = self.methods
        summary["windows"] = [w.id for w in windows]
        (self.out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
        write_report(self.out_dir, rows, summary, traces)
        return summary

    def _one(self, window: Window, method: str, request: Request, audio, reference):
        try:
            if method in self.peers:
                return self.peers[method](window, audio, reference)
            if method in PEERS:
                return error_row(window, method, "peer not configured for this run")
            return run_method(method, request, self.target, self.source, self.options)
        except Exception as exc:  # one failing method must not end the benchmark; the row says why
            return error_row(window, method, f"{type(exc).__name__}: {exc}")

    def _warm(self, window: Window) -> None:
        """One untimed pass of every method, so session builds and first-call costs stay off the clock."""
        audio = load_audio(window.path)
        request = Request(request_id=f"warmup-{window.id}", audio=audio, language=window.lang)
        for method in self.methods:
            self._one(window, method, request, audio, None)


def _timeline_only(trace: dict) -> dict:
    """What the report's timeline needs (kept in memory for every run)."""
    return {"spans": trace["spans"], "decode_s": trace["decode_s"], "tokens": len(trace["tokens"])}


class _NoBar:
    def update(self, n):
        pass

    def set_description(self, text):
        pass

    def close(self):
        pass


def _progress(total: int, show: bool):
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="run", dynamic_ncols=True)


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start
