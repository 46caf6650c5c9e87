"""A request's stop flag, and the target's parts that check it before every call: sessions, beam rows and the
window group a file's waves share (``service._CancellableTarget`` hands them out)."""
from __future__ import annotations

import threading

from as2d_core.capabilities import BeamRows, BeamScoring, WindowBatching, WindowGroup
from as2d_core.contracts import Request, TargetSession
from as2d_core.decode.wrappers import SessionWrapper


class Cancelled(Exception):
    """The request was stopped between two target calls (deadline passed or client gone)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Cancel:
    """A request's stop flag, set by the web layer, read by the target before every call."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason or "cancelled")


class _CancellableRows:
    """Beam rows whose every step first checks the request's cancel flag."""

    def __init__(self, rows: BeamRows, cancel: Cancel):
        self.inner, self._cancel, self.width = rows, cancel, rows.width

    def first_logits(self):
        self._cancel.check()
        return self.inner.first_logits()

    def advance(self, rows):
        self._cancel.check()
        return self.inner.advance(rows)

    def close(self) -> None:
        self.inner.close()


class _CancellableSession(SessionWrapper):
    """A target session whose every call first checks the request's cancel flag."""

    def __init__(self, session: TargetSession, cancel: Cancel):
        super().__init__(session)
        self._cancel = cancel
        if isinstance(session, BeamScoring):  # beam search steps through its rows, not through verify
            self.beam_rows = lambda width, as_verified=False: _CancellableRows(session.beam_rows(width, as_verified),
                                                                              cancel)

    def first_token(self) -> int:
        self._cancel.check()
        return self.inner.first_token()

    def verify(self, root, candidates):
        self._cancel.check()
        return self.inner.verify(root, candidates)



class _CancellableGroup:
    """A window group whose rows' preparations and shared calls first check the request's cancel flag: a failed
    call fails every window of the wave (``decode.together``), so the whole file stops."""

    def __init__(self, group: WindowGroup, cancel: Cancel):
        self.inner, self.size, self._cancel = group, group.size, cancel

    def prepare(self, request: Request, threads: int) -> TargetSession:
        self._cancel.check()
        return self.inner.prepare(request, threads)

    def verify_rows(self, rows):
        self._cancel.check()
        return self.inner.verify_rows(rows)


def cancellable_group(target: WindowBatching, cancel: Cancel, size: int, threads: int) -> WindowGroup | None:
    """``target``'s window group of ``size`` rows, cancellable, or None where it has none."""
    group = target.window_group(size, threads)
    return None if group is None else _CancellableGroup(group, cancel)
