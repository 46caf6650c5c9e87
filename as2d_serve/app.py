"""The HTTP side: OpenAI's transcription and translation endpoints, admission, limits, errors, health and metrics.

Every request is checked in full (form, parameters, audio) before it queues,
so bad input costs no decode slot. At most ``decodes`` (or ``slots``) transcriptions
run at a time and at most ``queue_size`` wait; more are answered 429 with Retry-After.
Each request has a deadline from its arrival; when it passes, or when the
client goes away, the request's ``Cancel`` flag stops its target before the
next call and the engine stops its drafter, so the slot is free again.

After SIGINT or SIGTERM (``Drain``), new and waiting requests are answered 503
with Retry-After, decodes under way get ``grace_s`` to finish and are then
stopped the same way and answered 503; the server closes once nothing is left.

``stream=true`` answers with OpenAI's transcription events (server-sent events): a
``transcript.text.delta`` for each piece of text as the target commits it, then
``transcript.text.done``. as2d commits only verified tokens, so no delta is ever taken
back, and the deltas spell the final text exactly (``as2d_core.decode.deltas``). The answer's
status waits for the first piece, so a request the target refuses is still a 4xx.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor

import attrs
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from as2d_core.setup.options import SERVE

from .form import MODEL_ALIASES, read_ask
from .formats import error, stream_done, subtitles, verbose_json
from .metrics import CountedStatuses, Metrics
from .cancel import Cancel, Cancelled
from .service import Ask, InputError, TranscriptionService
from .upload import UploadLimit

POLL_S = 0.05  # how often a running request looks at its deadline and its client
# After a stop signal the socket closes once no request has come or gone for this long: less than any
# Retry-After, so a client that honours one finds the socket closed (refused), not reset.
QUIET_S = 0.3
TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"  # the same, with Whisper's translate task (into English)
_END = object()  # a stream's decode has finished


@attrs.frozen
class Limits:
    """What the server admits and how long it waits; the defaults are ``as2d serve``'s (``options.SERVE``)."""

    queue_size: int = SERVE["queue_size"].default  # requests waiting for a decode slot
    max_upload_bytes: int = int(SERVE["max_upload_mb"].default * 1024 * 1024)
    deadline_s: float = SERVE["deadline_s"].default  # from arrival to answer
    api_key: str | None = None
    grace_s: float = SERVE["grace_s"].default  # after a stop signal, for decodes under way


class QueueFull(Exception):
    pass


class Admission:
    """At most ``slots`` transcriptions at a time, and at most ``queue_size`` waiting for one."""

    def __init__(self, slots: int, queue_size: int, metrics: Metrics):
        self.slots, self.queue_size, self.metrics = slots, queue_size, metrics
        self._semaphore = asyncio.Semaphore(slots)
        self.waiting = self.active = 0
        self.mean_s = 5.0  # running mean of a transcription's time, for Retry-After

    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.mean_s * (self.waiting + 1) / self.slots))

    async def enter(self) -> None:
        if self._semaphore.locked() and self.waiting >= self.queue_size:
            raise QueueFull()
        self.waiting += 1
        self.metrics.waiting.set(self.waiting)
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
            self.metrics.waiting.set(self.waiting)
        self.active += 1
        self.metrics.active.set(self.active)

    def leave(self, took_s: float | None) -> None:
        if took_s is not None:
            self.mean_s = 0.8 * self.mean_s + 0.2 * took_s
        self.active -= 1
        self.metrics.active.set(self.active)
        self._semaphore.release()


class Drain:
    """A stop signal's grace period, as the requests see it; the event loop is its only thread."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.deadline: float | None = None
        self.in_flight = 0
        self.last_seen = time.monotonic()  # a request's arrival or its answer

    def begin(self) -> None:
        """The first signal starts the grace period; another ends it at once."""
        now = time.monotonic()
        self.deadline = now + self.grace_s if self.deadline is None else min(self.deadline, now)

    @property
    def started(self) -> bool:
        return self.deadline is not None

    def overdue(self) -> bool:
        return self.started and time.monotonic() >= self.deadline

    def retry_after_s(self) -> int:
        """Until this server is gone; a replacement may be up by then."""
        return max(1, math.ceil(self.deadline - time.monotonic()))

    def done(self) -> bool:
        """Whether the server may close: nothing in flight and quiet for QUIET_S, or the grace period over."""
        quiet = self.in_flight == 0 and time.monotonic() - self.last_seen >= QUIET_S
        return self.started and (quiet or self.overdue())

    @contextlib.contextmanager
    def serving(self):
        """Around each transcription request, so that the server closes only when none is left."""
        self.in_flight += 1
        self.last_seen = time.monotonic()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_seen = time.monotonic()


def _event(data: dict) -> bytes:
    """One server-sent event."""
    return f"data: {json.dumps(data)}\n\n".encode()


def create_app(service: TranscriptionService, limits: Limits = Limits()) -> FastAPI:
    metrics = Metrics()
    admission = Admission(service.concurrency, limits.queue_size, metrics)
    drain = Drain(limits.grace_s)
    executor = ThreadPoolExecutor(max_workers=service.concurrency, thread_name_prefix="as2d-decode")
    if service.scheduler is not None:
        metrics.watch(service.scheduler)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="as2d", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.drain = drain  # started by the server on a stop signal (``server``)
    app.add_middleware(UploadLimit, max_bytes=limits.max_upload_bytes)
    # outermost: every answer to a transcription is counted, the upload limit's 413 included
    app.add_middleware(CountedStatuses, counter=metrics.requests, paths=(TRANSCRIPTIONS, TRANSLATIONS))

    @app.exception_handler(HTTPException)
    async def http_error(_request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(_request, exc: Exception):
        return error(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")

    def authorized(request: Request) -> bool:
        if limits.api_key is None:
            return True
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), limits.api_key.encode())

    def unauthorized() -> JSONResponse:
        return error(401, "missing or wrong API key (send 'Authorization: Bearer KEY')", kind="authentication_error")

    @app.get("/health")
    async def health():
        state = {"status": "stopping" if drain.started else "ok", "target": service.target_name,
                 "source": service.default_source, "method": service.method, "decodes": service.settings.decodes,
                 "slots": service.settings.slots, "active": admission.active, "waiting": admission.waiting}
        return JSONResponse(state, status_code=503 if drain.started else 200)

    @app.get("/v1/models")
    async def models(request: Request):
        if not authorized(request):
            return unauthorized()
        # what a request may name as ``model``: the target, and the aliases that mean it (drafters are not models
        # a request can ask for; ``source`` names one, and ``as2d sources list`` lists them)
        names = (service.target_name, *MODEL_ALIASES)
        return {"object": "list",
                "data": [{"id": name, "object": "model", "owned_by": "as2d", "target": service.target_name}
                         for name in names]}

    @app.get("/metrics")
    async def metrics_text(request: Request):
        if not authorized(request):
            return unauthorized()
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.post(TRANSCRIPTIONS)
    async def transcriptions(request: Request):
        return await _serve(request, "asr")

    @app.post(TRANSLATIONS)
    async def translations(request: Request):
        return await _serve(request, "translate")

    async def _serve(request: Request, task: str) -> Response:
        if not authorized(request):
            return unauthorized()
        try:
            with drain.serving():
                response = await _transcribe(request, task)
        except Exception as exc:  # a server fault, not the request's: answered, counted, and the server goes on
            response = error(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")
        return response

    async def _transcribe(request: Request, task: str) -> Response:
        arrived = time.monotonic()
        try:
            ask, response_format, stream = await read_ask(request, task, service)
        except InputError as exc:
            return error(400, str(exc), param=getattr(exc, "param", None))
        if drain.started:  # checked after the upload is read: answering mid-upload would reset the connection
            return _cancelled("shutdown")
        cancel = Cancel()
        entering = asyncio.ensure_future(admission.enter())
        try:
            await _watch(entering, request, cancel, arrived)
        except QueueFull:
            return error(429, f"all {admission.queue_size} queue places are taken; retry later",
                         kind="rate_limit_error", headers={"Retry-After": str(admission.retry_after_s())})
        if cancel.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                entering.cancel()
                await entering
            if entering.done() and not entering.cancelled() and entering.exception() is None:
                admission.leave(None)
            return _cancelled(cancel.reason)
        queued_s = time.monotonic() - arrived
        metrics.queue_wait.observe(queued_s)
        if stream:
            return await _stream(ask, request, cancel, arrived, queued_s)
        took = None
        try:
            work = asyncio.get_running_loop().run_in_executor(executor, service.transcribe, ask, cancel)
            try:
                outcome = await _watch(work, request, cancel, arrived)
            except Cancelled as exc:
                metrics.stopped.labels(exc.reason).inc()
                return _cancelled(exc.reason)
            except InputError as exc:
                return error(400, str(exc))
            took = outcome.total_s
        finally:
            admission.leave(took)
        outcome.queued_s = queued_s
        metrics.served(outcome)
        return _render(outcome, response_format, task)

    async def _stream(ask: Ask, request: Request, cancel: Cancel, arrived: float, queued_s: float) -> Response:
        """``stream=true``: the decode runs on its slot while its pieces of text go out as events.

        The slot is given back when the decode ends (also when the client has gone: it is stopped at its
        next target call). The status is decided at the first piece: before it, a refusal is a 4xx.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue = asyncio.Queue()
        work = loop.run_in_executor(executor, service.transcribe, ask, cancel,
                                    lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece))

        def problem() -> BaseException | None:
            """What stopped the decode (None: it gave a transcript); only once it has ended."""
            return Cancelled("shutdown") if work.cancelled() else work.exception()

        def ended(_done) -> None:  # after every piece: they were queued on the loop before the decode returned
            admission.leave(None if problem() else work.result().total_s)
            if isinstance(problem(), Cancelled):
                metrics.stopped.labels(problem().reason).inc()
            pieces.put_nowait(_END)

        work.add_done_callback(ended)

        async def next_piece(client_watched: bool):
            """The next piece or _END; meanwhile the deadline and a stop signal (and, before the stream, the
            client) are watched, as for any request; a flagged decode stops at its next target call."""
            getting = asyncio.ensure_future(pieces.get())
            try:
                while True:
                    done, _ = await asyncio.wait({getting}, timeout=POLL_S)
                    if done:
                        return getting.result()
                    if client_watched and await request.is_disconnected():
                        cancel.set("client disconnected")
                    elif time.monotonic() - arrived > limits.deadline_s:
                        cancel.set("deadline")
                    elif drain.overdue():
                        cancel.set("shutdown")
            finally:
                getting.cancel()

        def failure(exc: BaseException) -> Response:
            if isinstance(exc, Cancelled):
                return _cancelled(exc.reason)
            if isinstance(exc, InputError):
                return error(400, str(exc))
            return error(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error")

        try:
            first = await next_piece(client_watched=True)
        except BaseException:
            cancel.set("client disconnected")
            raise
        if first is _END and problem() is not None:
            return failure(problem())

        async def events():
            with drain.serving():
                try:  # once the response has started, the client's leaving cancels this generator
                    piece = first
                    while piece is not _END:
                        yield _event({"type": "transcript.text.delta", "delta": piece})
                        piece = await next_piece(client_watched=False)
                    if problem() is not None:  # stopped mid-stream: OpenAI's error object, as an event
                        yield _event({"type": "error", "error": json.loads(failure(problem()).body)["error"]})
                        return
                    outcome = work.result()
                    outcome.queued_s = queued_s
                    metrics.served(outcome)
                    yield _event(stream_done(outcome))
                finally:
                    if not work.done():
                        cancel.set("client disconnected")

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def _watch(future, request: Request, cancel: Cancel, arrived: float):
        """Wait for ``future``; meanwhile flag the request when its client leaves or its deadline passes."""
        future = asyncio.ensure_future(future)
        while True:
            done, _ = await asyncio.wait({future}, timeout=POLL_S)
            if done:
                return future.result()
            if cancel.is_set():
                if not isinstance(future, asyncio.Task):
                    if cancel.reason == "shutdown":
                        # the grace period is over: answered now, before the server closes; the decode
                        # stops at its next target call, which on a busy machine can be seconds away
                        raise Cancelled("shutdown")
                    continue  # a decode stops at its next target call; wait for it to give its slot back
                return None
            if await request.is_disconnected():
                cancel.set("client disconnected")
            elif time.monotonic() - arrived > limits.deadline_s:
                cancel.set("deadline")
            elif drain.overdue() or (drain.started and isinstance(future, asyncio.Task)):
                cancel.set("shutdown")  # a waiting request at once, a decode once the grace period is over

    def _cancelled(reason: str | None) -> Response:
        if reason == "shutdown":
            return error(503, "the server is shutting down; retry later", kind="server_shutting_down",
                         headers={"Retry-After": str(drain.retry_after_s())})
        if reason == "deadline":
            return error(504, f"the request did not finish within the server's deadline of {limits.deadline_s:g} s",
                         kind="timeout_error")
        return error(499, "the client closed the connection", kind="client_closed")

    def _render(outcome, response_format: str, task: str) -> Response:
        if response_format == "json":
            return JSONResponse({"text": outcome.transcript.text})
        if response_format == "verbose_json":
            return JSONResponse(verbose_json(outcome, task))
        if response_format == "text":
            return PlainTextResponse(outcome.transcript.text)
        return PlainTextResponse(subtitles(outcome, response_format),
                                 media_type="text/vtt" if response_format == "vtt" else "text/plain")

    return app
