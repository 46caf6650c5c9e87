"""Prometheus metrics of one server (its own registry, so two servers in one process never mix)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from .service import Transcription


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("as2d_requests", "Transcription requests by HTTP status", ["status"], registry=r)
        self.tokens = Counter("as2d_tokens", "Response tokens committed", registry=r)
        self.proposed = Counter("as2d_proposed_tokens", "Drafter candidates verified", registry=r)
        self.accepted = Counter("as2d_accepted_tokens", "Drafter candidates accepted", registry=r)
        self.latency = Histogram("as2d_request_seconds", "Time from admission to answer", registry=r,
                                 buckets=(0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))
        self.faults = Counter("as2d_drafter_faults", "Drafter faults injected on purpose", ["kind"], registry=r)
        self.drafter_errors = Counter("as2d_drafter_errors", "Requests whose drafter failed (output unaffected)",
                                      registry=r)
        self.rebuilds = Counter("as2d_drafter_rebuilds", "Drafters dropped after a failure, rebuilt on next use",
                                registry=r)
        self.stopped = Counter("as2d_decodes_stopped", "Decodes stopped at a target call before their end, by reason",
                               ["reason"], registry=r)
        self.waiting = Gauge("as2d_queue_waiting", "Requests waiting for a decode slot", registry=r)
        self.active = Gauge("as2d_decodes_active", "Transcriptions running", registry=r)
        self.queue_wait = Histogram("as2d_queue_wait_seconds", "Time from arrival to a decode slot", registry=r,
                                    buckets=(0.01, 0.1, 0.5, 1, 2, 4, 8, 16, 32, 64))
        # with --slots: the scheduler's target calls and the decodes that draft (as2d_core.decode.scheduler)
        self.batch_rows = Histogram("as2d_batch_rows", "Decodes in each target call (rows verified together, or "
                                    "beam searches stepped together)", registry=r, buckets=(1, 2, 3, 4, 6, 8, 12, 16))
        self.speculating = Gauge("as2d_rows_speculating", "Decodes drafting now (the others run target-only)",
                                 registry=r)

    def watch(self, scheduler) -> None:
        """The scheduler's calls and drafting decodes, as they happen."""
        scheduler.listeners.append(self.batch_rows.observe)
        self.speculating.set_function(lambda: scheduler.drafting)

    def served(self, t: Transcription) -> None:
        totals = t.transcript.totals()
        self.tokens.inc(totals["tokens"])
        self.proposed.inc(totals["proposed"])
        self.accepted.inc(totals["accepted"])
        self.latency.observe(t.total_s)
        if t.fault:
            self.faults.labels(t.fault).inc()
        if t.drafter_error:
            self.drafter_errors.inc()
        if t.drafter_rebuilt:
            self.rebuilds.inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)


class CountedStatuses:
    """ASGI middleware: every answer to a request for one of ``paths`` counted by its status, whoever gave it
    (the upload limit's 413 and the API key's 401 come before the endpoint runs)."""

    def __init__(self, app, counter: Counter, paths: tuple[str, ...]):
        self.app, self.counter, self.paths = app, counter, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start":
                self.counter.labels(str(message["status"])).inc()
            await send(message)

        return await self.app(scope, receive, counted)
