"""SIGTERM to ``as2d bench`` leaves ``results.jsonl`` whole, and the same command resumes it.

The bench runs in its own process on real speech (``tests/data/clips.jsonl``) with the real
Whisper pair; a signal that arrives while a window is written waits for the write to end.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import full_only

from as2d_bench import folder as folder_module
from as2d_bench.folder import ResultsFolder

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "data" / "clips.jsonl"
WINDOWS, LABELS = 6, ("target-only", "as2d")
WAIT_S = 300  # model loading and six windows on a busy two-core machine


def _bench(out: Path) -> list[str]:
    return [sys.executable, "-m", "as2d_core.cli.main", "bench", str(MANIFEST), "--methods", ",".join(LABELS),
            "--limit", str(WINDOWS), "--no-warmup", "--out", str(out)]


def _windows(results: Path) -> Counter:
    """Rows per window; every line must be a whole JSON row."""
    text = results.read_text()
    assert text.endswith("\n")
    return Counter(json.loads(line)["window"] for line in text.splitlines())


@full_only  # the benchmark's own resume (23 s); `as2d run`'s, `stream`'s and the server's signals are the default run's
def test_sigterm_mid_run_leaves_whole_windows_and_the_same_command_resumes(tmp_path):
    out = tmp_path / "out"
    results = out / "results.jsonl"
    process = subprocess.Popen(_bench(out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + WAIT_S
    while not (results.is_file() and results.stat().st_size) and time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # the first window is written; the second is being decoded
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "run the same command again to resume" in stderr and "Traceback" not in stderr
    stopped = results.read_text()
    windows = _windows(results)
    assert 1 <= len(windows) < WINDOWS and set(windows.values()) == {len(LABELS)}  # whole windows only

    resumed = subprocess.run(_bench(out), cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{WINDOWS - len(windows)} windows run" in resumed.stdout
    assert results.read_text().startswith(stopped)  # the rows written before the signal are kept as they were
    windows = _windows(results)
    assert len(windows) == WINDOWS and set(windows.values()) == {len(LABELS)}


def test_a_signal_during_a_write_acts_once_the_write_is_whole(tmp_path, monkeypatch):
    folder = ResultsFolder(tmp_path, {"methods": ["target-only"]}, ["target-only"], save_traces=True)
    folder.open()
    write = folder_module._append_durably

    def signalled_write(path, text):
        signal.raise_signal(signal.SIGINT)  # as if Ctrl-C came between the traces and the rows (to this thread)
        write(path, text)

    monkeypatch.setattr(folder_module, "_append_durably", signalled_write)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt):  # Python's own SIGINT handler, once both files are written
            folder.append([{"window": "w", "method": "target-only"}], [{"window": "w", "label": "target-only"}])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert folder.rows() == [{"window": "w", "method": "target-only"}]
    assert len(folder.traces.read_text().splitlines()) == 1
