"""``as2d serve`` in a child process on a free local port, and a small client for it (tests and soaks)."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from .app import TRANSCRIPTIONS


class ServerFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_clients(clients: int, client: Callable[[], None]) -> float:
    """``client`` run by ``clients`` threads at once, as that many users would; the seconds until all are done."""
    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


class ServerProcess:
    """Starts ``as2d serve ARGS`` on 127.0.0.1 and returns once ``/health`` answers; ``stop`` ends it."""

    def __init__(self, *args: str, env: dict | None = None, cwd: Path | None = None,
                 start_timeout_s: float = 300.0, stderr=None, request_timeout_s: float = 600.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.request_timeout_s = request_timeout_s
        self.process = subprocess.Popen(
            [sys.executable, "-m", "as2d_core.cli.main", "serve", "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=env, cwd=cwd)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"as2d serve exited with status {self.process.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.stop()
        raise ServerFailed(f"as2d serve did not answer /health within {start_timeout_s:.0f} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def post(self, data: bytes, headers: dict | None = None, **fields) -> httpx.Response:
        """One transcription request with ``data`` as the uploaded file and ``fields`` as form fields
        (``model`` is whisper-1 unless given; ``model=None`` leaves it out)."""
        fields = {"model": "whisper-1", **fields}
        return httpx.post(self.url + TRANSCRIPTIONS, files={"file": ("audio.wav", data, "audio/wav")},
                          data={k: str(v) for k, v in fields.items() if v is not None}, headers=headers,
                          timeout=self.request_timeout_s)

    def health(self) -> dict:
        response = httpx.get(self.url + "/health", timeout=10)
        response.raise_for_status()
        return response.json()

    def metric(self, sample: str, headers: dict | None = None) -> float:
        """The value of one Prometheus sample, e.g. ``as2d_requests_total{status="200"}`` (0 when absent)."""
        text = httpx.get(self.url + "/metrics", timeout=10, headers=headers).text
        found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def wait_for(self, condition, timeout_s: float) -> dict | None:
        """Poll ``/health`` until ``condition(state)``; the state, or None when ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.health()
            if condition(state):
                return state
            time.sleep(0.02)
        return None
