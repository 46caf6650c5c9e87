"""One transcription request's life on the server: read and checked, admitted, decoded on a slot (or
streamed as it is committed), watched for its client, its deadline and a stop signal, and answered.

A request that waits or decodes is watched every ``POLL_S``; when its client goes away, its deadline
passes (``Limits.deadline_for``: longer audio is given longer), or the server's grace period is over, its
``Cancel`` flag is set, which stops its target before the next call (``cancel``) and so frees its slot.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from as2d_core.contracts import SAMPLE_RATE

from .admission import DEADLINE_AUDIO_S, Admission, Drain, Limits, QueueFull
from .cancel import Cancel, Cancelled
from .form import read_ask
from .formats import error, server_fault, stream_done, subtitles, verbose_json
from .metrics import Metrics
from .service import Ask, InputError, TranscriptionService

POLL_S = 0.05  # how often a waiting or running request looks at its client, its deadline and a stop signal
_END = object()  # a stream's decode has finished


def _event(data: dict) -> bytes:
    """One server-sent event."""
    return f"data: {json.dumps(data)}\n\n".encode()


class RequestHandling:
    """The transcription and translation endpoints' work, over one service and its admission."""

    def __init__(self, service: TranscriptionService, limits: Limits, metrics: Metrics):
        self.service, self.limits, self.metrics = service, limits, metrics
        self.admission = Admission(service.concurrency, limits.queue_size, metrics)
        self.drain = Drain(limits.grace_s)  # started by the server on a stop signal (``server``)
        self.executor = ThreadPoolExecutor(max_workers=service.concurrency, thread_name_prefix="as2d-decode")

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def serve(self, request: Request, task: str) -> Response:
        """A transcription (``task`` asr) or translation request's answer; a server fault is answered 500."""
        try:
            with self.drain.serving():
                return await self._transcribe(request, task)
        except Exception as exc:  # a server fault, not the request's: answered, counted, and the server goes on
            return server_fault(exc)

    async def _transcribe(self, request: Request, task: str) -> Response:
        arrived = time.monotonic()
        try:
            ask, response_format, stream = await read_ask(request, task, self.service)
        except InputError as exc:
            return error(400, str(exc), param=getattr(exc, "param", None))
        if self.drain.started:  # checked after the upload is read: answering mid-upload would reset the connection
            return self.cancelled("shutdown")
        cancel = Cancel()
        due = arrived + self.limits.deadline_for(ask.samples.size / SAMPLE_RATE)
        entering = asyncio.ensure_future(self.admission.enter())
        try:
            await self._watch(entering, request, cancel, due)
        except QueueFull:
            return error(429, f"all {self.admission.queue_size} queue places are taken; retry later",
                         kind="rate_limit_error", headers={"Retry-After": str(self.admission.retry_after_s())})
        if cancel.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                entering.cancel()
                await entering
            if entering.done() and not entering.cancelled() and entering.exception() is None:
                self.admission.leave(None)
            return self.cancelled(cancel.reason)
        queued_s = time.monotonic() - arrived
        self.metrics.queue_wait.observe(queued_s)
        if stream:
            return await self._stream(ask, request, cancel, due, queued_s)
        took = None
        try:
            work = asyncio.get_running_loop().run_in_executor(self.executor, self.service.transcribe, ask, cancel)
            try:
                outcome = await self._watch(work, request, cancel, due)
            except Cancelled as exc:
                self.metrics.stopped.labels(exc.reason).inc()
                return self.cancelled(exc.reason)
            except InputError as exc:
                return error(400, str(exc))
            took = outcome.total_s
        finally:
            self.admission.leave(took)
        outcome.queued_s = queued_s
        self.metrics.served(outcome)
        return render(outcome, response_format, task)

    async def _flag_if_due(self, request: Request | None, cancel: Cancel, due: float, waiting: bool) -> None:
        """Set ``cancel`` when the client (unless ``request`` is None) has gone, the deadline ``due`` has passed, or
        the server's grace period is over (for a request still ``waiting`` for a slot: as soon as a stop signal
        came)."""
        if request is not None and await request.is_disconnected():
            cancel.set("client disconnected")
        elif time.monotonic() > due:
            cancel.set("deadline")
        elif self.drain.overdue() or (waiting and self.drain.started):
            cancel.set("shutdown")

    async def _watch(self, future, request: Request, cancel: Cancel, due: float):
        """Wait for ``future`` (a slot, or a decode); meanwhile flag the request when it is due (``_flag_if_due``)."""
        future = asyncio.ensure_future(future)
        waiting = isinstance(future, asyncio.Task)  # for a slot; a decode runs in the executor
        while True:
            done, _ = await asyncio.wait({future}, timeout=POLL_S)
            if done:
                return future.result()
            if cancel.is_set():
                if not waiting:
                    if cancel.reason == "shutdown":
                        # the grace period is over: answered now, before the server closes; the decode
                        # stops at its next target call, which on a busy machine can be seconds away
                        raise Cancelled("shutdown")
                    continue  # a decode stops at its next target call; wait for it to give its slot back
                return None
            await self._flag_if_due(request, cancel, due, waiting)

    async def _stream(self, ask: Ask, request: Request, cancel: Cancel, due: float, queued_s: float) -> Response:
        """``stream=true``: the decode runs on its slot while its pieces of text go out as events.

        The slot is given back when the decode ends (also when the client has gone: it is stopped at its
        next target call). The status is decided at the first piece: before it, a refusal is a 4xx.
        """
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue = asyncio.Queue()
        work = loop.run_in_executor(self.executor, self.service.transcribe, ask, cancel,
                                    lambda piece: loop.call_soon_threadsafe(pieces.put_nowait, piece))

        def problem() -> BaseException | None:
            """What stopped the decode (None: it gave a transcript); only once it has ended."""
            return Cancelled("shutdown") if work.cancelled() else work.exception()

        def ended(_done) -> None:  # after every piece: they were queued on the loop before the decode returned
            self.admission.leave(None if problem() else work.result().total_s)
            if isinstance(problem(), Cancelled):
                self.metrics.stopped.labels(problem().reason).inc()
            pieces.put_nowait(_END)

        work.add_done_callback(ended)

        async def next_piece(client_watched: bool):
            """The next piece or _END; meanwhile the request is flagged when it is due (once the stream has
            started, the client's leaving ends the response itself)."""
            getting = asyncio.ensure_future(pieces.get())
            try:
                while True:
                    done, _ = await asyncio.wait({getting}, timeout=POLL_S)
                    if done:
                        return getting.result()
                    await self._flag_if_due(request if client_watched else None, cancel, due, waiting=False)
            finally:
                getting.cancel()

        def failure(exc: BaseException) -> Response:
            if isinstance(exc, Cancelled):
                return self.cancelled(exc.reason)
            if isinstance(exc, InputError):
                return error(400, str(exc))
            return server_fault(exc)

        try:
            first = await next_piece(client_watched=True)
        except BaseException:
            cancel.set("client disconnected")
            raise
        if first is _END and problem() is not None:
            return failure(problem())

        async def events():
            with self.drain.serving():
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
                    self.metrics.served(outcome)
                    yield _event(stream_done(outcome))
                finally:
                    if not work.done():
                        cancel.set("client disconnected")

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    def cancelled(self, reason: str | None) -> Response:
        """The answer to a request stopped for ``reason`` (shutdown, deadline, or its client gone)."""
        if reason == "shutdown":
            return error(503, "the server is shutting down; retry later", kind="server_shutting_down",
                         headers={"Retry-After": str(self.drain.retry_after_s())})
        if reason == "deadline":
            return error(504, f"the request did not finish within the server's deadline of "
                              f"{self.limits.deadline_s:g} s for each {DEADLINE_AUDIO_S:g} s of audio",
                         kind="timeout_error")
        return error(499, "the client closed the connection", kind="client_closed")


def render(outcome, response_format: str, task: str) -> Response:
    """A transcription in the response format the request asked for."""
    if response_format == "json":
        return JSONResponse({"text": outcome.transcript.text})
    if response_format == "verbose_json":
        return JSONResponse(verbose_json(outcome, task))
    if response_format == "text":
        return PlainTextResponse(outcome.transcript.text)
    return PlainTextResponse(subtitles(outcome, response_format),
                             media_type="text/vtt" if response_format == "vtt" else "text/plain")
