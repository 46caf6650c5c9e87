"""Soak ``as2d serve``: many requests against one server, with drafter faults and bad uploads mixed in.

Phase 1 (one server with every drafter fault injected in turn on every
``--fault-every``-th request): the target-only answer of every window first,
then ``--requests`` sequential requests over the windows, every
``--bad-every``-th one a bad upload. It checks that every answer equals
target-only (zero wrong or lost answers), that every bad upload gets a 4xx,
that the server's resident memory grows at most ``--max-rss-growth`` from
request 100 to the last, and that its threads and open files come back to
their counts at request 100 (warm: every fault has happened and every runtime
session built lazily, per thread count, exists; the counts at the start are
reported too).

Phase 2 (a fresh server without faults): throughput and p50/p95 latency with
1 and 4 concurrent clients.

    python scripts/split_manifest.py ../shared/data/speech/windows.jsonl bench-out/dev.jsonl bench-out/test.jsonl
    python scripts/soak_serve.py bench-out/dev.jsonl --requests 1000 --out bench-out/soak.json

Needs ``psutil`` (the bench extra) to read the server's memory, threads and files.
Exit status 1 when any check fails.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import soundfile

from as2d_core.decode.faults import FAULTS
from as2d_serve.launch import ServerProcess, run_clients


class Server(ServerProcess):
    """The server under soak, with its process's memory, threads and files at hand."""

    def __init__(self, args: list[str]):
        super().__init__(*args, start_timeout_s=600)
        self.ps = psutil.Process(self.process.pid)

    def usage(self) -> dict:
        return {"rss": self.ps.memory_info().rss, "threads": self.ps.num_threads(), "files": len(self.ps.open_files()),
                "fds": self.ps.num_fds()}

    def idle(self, timeout_s: float) -> None:
        """Wait until no request is running or waiting."""
        self.wait_for(lambda state: state["active"] == 0 and state["waiting"] == 0, timeout_s)


def wav_bytes(samples: np.ndarray, subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, 16_000, format="WAV", subtype=subtype)
    return out.getvalue()


def bad_uploads(window: bytes, max_upload_bytes: int) -> list[tuple[str, bytes, dict]]:
    """The input matrix: each must be answered 4xx."""
    nan = np.zeros(16_000, np.float32)
    nan[10] = np.nan
    return [
        ("empty", b"", {}),
        ("not audio", b"not audio at all\n" * 64, {}),
        ("truncated", window[: len(window) // 2], {}),
        ("NaN samples", wav_bytes(nan, "FLOAT"), {}),
        ("unknown language", window, {"language": "xx"}),
        ("unknown source", window, {"source": "no-such-drafter"}),
        ("budget out of range", window, {"budget": "0"}),
        ("oversize", b"\0" * (max_upload_bytes + 1), {}),
    ]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def sequential_soak(args, windows: list[tuple[str, bytes]]) -> dict:
    faults = [a for kind in FAULTS for a in ("--fault", kind)]
    server = Server([*faults, "--fault-every", str(args.fault_every), "--stall-s", str(args.stall_s),
                     "--max-upload-mb", str(args.max_upload_mb), *args.serve_args])
    try:
        reference = {}
        for name, data in windows:
            response = server.post(data, method="target-only", response_format="verbose_json")
            response.raise_for_status()
            reference[name] = response.json()["as2d"]["tokens"]
        start_usage = server.usage()
        bad = bad_uploads(windows[0][1], int(args.max_upload_mb * 1024 * 1024))
        wrong, lost, bad_accepted, faults_seen = [], [], [], {}
        rss_baseline = baseline = None
        latencies, timeline = [], []
        for i in range(1, args.requests + 1):
            if i % args.bad_every == 0:
                label, data, fields = bad[(i // args.bad_every - 1) % len(bad)]
                response = server.post(data, **fields)
                if not 400 <= response.status_code < 500:
                    bad_accepted.append((i, label, response.status_code))
            else:
                name, data = windows[i % len(windows)]
                start = time.perf_counter()
                try:
                    response = server.post(data, response_format="verbose_json")
                except httpx.HTTPError as exc:
                    lost.append((i, name, repr(exc)))
                    continue
                latencies.append(time.perf_counter() - start)
                if response.status_code != 200:
                    lost.append((i, name, response.status_code, response.text[:200]))
                    continue
                body = response.json()["as2d"]
                if body["fault"]:
                    faults_seen[body["fault"]] = faults_seen.get(body["fault"], 0) + 1
                if body["tokens"] != reference[name]:
                    wrong.append((i, name, body["fault"]))
            if i == args.rss_from:  # warm: every fault kind has happened, every lazily built session exists
                baseline = server.usage()
                rss_baseline = baseline["rss"]
            if i % 50 == 0:
                timeline.append({"request": i, **server.usage()})
                print(f"  {i}/{args.requests}: wrong {len(wrong)}, lost {len(lost)}, bad accepted {len(bad_accepted)}",
                      file=sys.stderr)
        server.idle(60)
        time.sleep(args.stall_s + 3)  # a stalled drafter thread ends when its stall does
        end_usage = server.usage()
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
    finally:
        server.stop()
    growth = (end_usage["rss"] - rss_baseline) / rss_baseline if rss_baseline else None
    return {
        "requests": args.requests, "windows": len(windows), "wrong": wrong, "lost": lost,
        "bad_uploads_not_4xx": bad_accepted, "faults_seen": faults_seen,
        "rss_from_request": args.rss_from, "rss_at_baseline": rss_baseline, "usage_start": start_usage, "usage_baseline": baseline, "usage_end": end_usage, "rss_growth_to_end": growth,
        "latency_p50_s": percentile(latencies, 50), "latency_p95_s": percentile(latencies, 95),
        "drafter_faults_metric": [line for line in metrics.splitlines() if line.startswith("as2d_drafter_")],
        "usage_every_50": timeline,
    }


def throughput(args, windows: list[tuple[str, bytes]], clients: int) -> dict:
    server = Server(["--queue-size", str(max(8, clients * 2)), *args.serve_args])
    try:
        server.post(windows[0][1])  # warm-up
        jobs = [windows[i % len(windows)][1] for i in range(args.throughput_requests)]
        latencies, failures, lock = [], 0, threading.Lock()

        def client() -> None:
            nonlocal failures
            while True:
                with lock:
                    if not jobs:
                        return
                    data = jobs.pop()
                start = time.perf_counter()
                response = server.post(data)
                with lock:
                    latencies.append(time.perf_counter() - start)
                    failures += response.status_code != 200

        elapsed = run_clients(clients, client)
    finally:
        server.stop()
    return {"clients": clients, "requests": len(latencies), "failures": failures,
            "requests_per_s": len(latencies) / elapsed, "p50_s": percentile(latencies, 50),
            "p95_s": percentile(latencies, 95)}


def load_windows(manifest: Path) -> list[tuple[str, bytes]]:
    out = []
    for line in manifest.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            path = Path(row["path"])
            path = path if path.is_absolute() else manifest.parent / path
            out.append((row["id"], path.read_bytes()))
    return out


def publish(report: dict, out: Path | None) -> int:
    """The report as JSON on stdout (and in ``out``), a PASS or FAIL line per check on stderr; the exit status."""
    text = json.dumps(report, indent=1)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text)
    for name, ok in report["checks"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}", file=sys.stderr)
    return 0 if all(report["checks"].values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path, help="JSONL of windows (id, path), e.g. the dev half")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--fault-every", type=int, default=10)
    parser.add_argument("--bad-every", type=int, default=20)
    parser.add_argument("--stall-s", type=float, default=5.0)
    parser.add_argument("--max-upload-mb", type=float, default=4.0)
    parser.add_argument("--max-rss-growth", type=float, default=0.05)
    parser.add_argument("--rss-from", type=int, default=100, help="request whose memory is the growth baseline")
    parser.add_argument("--windows", type=int, default=0, help="use only the first N windows (0: all)")
    parser.add_argument("--throughput-requests", type=int, default=40, help="per client count; 0 skips phase 2")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--serve-arg", dest="serve_args", action="append", default=[],
                        help="extra `as2d serve` argument (repeat), e.g. --serve-arg=--decodes --serve-arg=2")
    args = parser.parse_args()
    windows = load_windows(args.manifest)[: args.windows or None]
    print(f"soak: {args.requests} requests over {len(windows)} windows", file=sys.stderr)
    report = {"soak": sequential_soak(args, windows), "throughput": []}
    if args.throughput_requests:
        for clients in (int(c) for c in args.clients.split(",")):
            report["throughput"].append(throughput(args, windows, clients))
    soak = report["soak"]
    start, end = soak["usage_baseline"] or soak["usage_start"], soak["usage_end"]
    checks = {
        "zero wrong answers": not soak["wrong"],
        "zero lost answers": not soak["lost"],
        "every bad upload 4xx": not soak["bad_uploads_not_4xx"],
        f"rss growth {args.rss_from}->end <= {args.max_rss_growth:.0%}": soak["rss_growth_to_end"] is not None
        and soak["rss_growth_to_end"] <= args.max_rss_growth,
        f"threads back to their count at request {args.rss_from}": end["threads"] <= start["threads"],
        f"open files back to their count at request {args.rss_from}": end["files"] <= start["files"]
        and end["fds"] <= start["fds"],
    }
    report["checks"] = checks
    status = publish(report, args.out)
    for row in report["throughput"]:
        print(f"{row['clients']} client(s): {row['requests_per_s']:.2f} req/s, p50 {row['p50_s']:.2f} s, "
              f"p95 {row['p95_s']:.2f} s, {row['failures']} failures", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
