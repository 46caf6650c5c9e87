"""Uploaded bytes to 16 kHz mono samples, never through a path on the server's disk.

Decoded from memory by the same reader as ``as2d run`` (``as2d_core.input.audio.read_audio``: PyAV, soxr),
so every format the command takes is taken here. Unlike the command, which transcribes a truncated
file as far as it goes and warns, a truncated upload is refused: a client that sent half a file
should hear so rather than get half a transcript.
"""
from __future__ import annotations

import numpy as np

from as2d_core.input.audio import AudioError, read_audio

from .formats import error
from .service import InputError

LABEL = "the uploaded file"


class UploadError(InputError):
    """The upload is not usable audio; the message names the problem."""


def decode_upload(data: bytes) -> np.ndarray:
    """Float32 mono samples at 16 kHz from an uploaded file's bytes."""
    try:
        decoded = read_audio(bytes(data), label=LABEL)
    except AudioError as exc:
        raise UploadError(str(exc)) from exc
    if decoded.info.warnings:
        raise UploadError("; ".join(decoded.info.warnings))
    return decoded.samples


class UploadLimit:
    """ASGI middleware: a body over ``max_bytes`` is answered 413 before anything parses it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(scope, receive, send)
        if declared is not None:
            return await self.app(scope, receive, send)
        # No length declared (chunked): read it all here, up to the limit, then replay it.
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
            if not message.get("more_body"):
                break
        replay = iter(messages)

        async def replayed():
            return next(replay, None) or await receive()

        return await self.app(scope, replayed, send)

    async def _refuse(self, scope, receive, send):
        response = error(413, f"the upload is larger than this server's limit of {self.max_bytes} bytes",
                         param="file")
        await response(scope, receive, send)
