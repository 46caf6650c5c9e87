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

import contextlib
import hmac

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from .admission import Limits
from .formats import error, server_fault
from .handling import RequestHandling
from .metrics import CountedStatuses, Metrics
from .service import TranscriptionService
from .upload import UploadLimit

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"  # the same, with Whisper's translate task (into English)


def _authorized(request: Request, api_key: str | None) -> bool:
    if api_key is None:
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), api_key.encode())


def _unauthorized() -> JSONResponse:
    return error(401, "missing or wrong API key (send 'Authorization: Bearer KEY')", kind="authentication_error")


def create_app(service: TranscriptionService, limits: Limits = Limits()) -> FastAPI:
    """The FastAPI application: the routes, the upload limit, the status counter and the error handlers; each
    transcription's work is ``handling.RequestHandling``'s."""
    metrics = Metrics()
    handling = RequestHandling(service, limits, metrics)
    if service.scheduler is not None:
        metrics.watch(service.scheduler)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        handling.close()

    app = FastAPI(title="as2d", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.drain = handling.drain  # started by the server on a stop signal (``server``)
    app.add_middleware(UploadLimit, max_bytes=limits.max_upload_bytes)
    # outermost: every answer to a transcription is counted, the upload limit's 413 included
    app.add_middleware(CountedStatuses, counter=metrics.requests, paths=(TRANSCRIPTIONS, TRANSLATIONS))

    @app.exception_handler(HTTPException)
    async def http_error(_request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(_request, exc: Exception):
        return server_fault(exc)

    @app.get("/health")
    async def health():
        drain, admission = handling.drain, handling.admission
        state = {"status": "stopping" if drain.started else "ok", "target": service.target_name,
                 "source": service.default_source, "method": service.method, "decodes": service.settings.decodes,
                 "slots": service.settings.slots, "active": admission.active, "waiting": admission.waiting}
        return JSONResponse(state, status_code=503 if drain.started else 200)

    @app.get("/v1/models")
    async def models(request: Request):
        if not _authorized(request, limits.api_key):
            return _unauthorized()
        # what a request may name as ``model``: the target, and the aliases that mean it (drafters are not models
        # a request can ask for; ``source`` names one, and ``as2d sources list`` lists them)
        return {"object": "list",
                "data": [{"id": name, "object": "model", "owned_by": "as2d", "target": service.target_name}
                         for name in service.model_names]}

    @app.get("/metrics")
    async def metrics_text(request: Request):
        if not _authorized(request, limits.api_key):
            return _unauthorized()
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    @app.post(TRANSCRIPTIONS)
    async def transcriptions(request: Request):
        if not _authorized(request, limits.api_key):
            return _unauthorized()
        return await handling.serve(request, "asr")

    @app.post(TRANSLATIONS)
    async def translations(request: Request):
        if not _authorized(request, limits.api_key):
            return _unauthorized()
        return await handling.serve(request, "translate")

    return app
