"""A source hosted in its own OS process.

Some runtimes (MNN 3.6.1's Python binding among them) keep the GIL while they
compute, so a drafter thread next to such a target starves, and drafting turns
into taking turns again. ``ProcessSource`` runs any source in a child process
and gives the engine the ordinary ``Source``/``DraftJob`` contracts: the child
drafts on its own cores, pieces arrive over a socket, and the bridge and the
publication stay in the parent's producer thread.

Next to a GIL-holding target the producer thread only runs between two of the
target's calls, and every blocking call hands the GIL back for a whole target
call. So the parent reads everything that has arrived in one ``recv`` and
never asks the child anything while drafting: each piece comes with the text of
the drafter's history after each of its tokens, which is what text bridges ask
``decode_text`` for.

The child serves one job at a time, numbered so a late message of an abandoned
job is never taken for the next one's. A child that dies, or does not stop a
job when asked, is replaced by a fresh one at the next ``prepare``; a failure
to prepare surfaces in ``pieces`` (the producer's side), so the target's output
is never touched. The child is started with ``spawn``: scripts that use a
``ProcessSource`` need the usual ``if __name__ == "__main__":`` guard.
"""
from __future__ import annotations

import collections
import multiprocessing
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from as2d_core.workers import lifetimes
from as2d_core.workers.cleanup import reported
from as2d_core.capabilities import TaskList
from as2d_core.contracts import DraftPiece, Request
from as2d_core.workers.priority import lower_thread_priority

STOP_TIMEOUT_S = 2.0
# The longest the parent waits for one piece or one decoded text, and a child for its send to be taken:
# a drafter that says nothing for this long is stalled and is replaced; nobody waits forever.
REPLY_TIMEOUT_S = 60.0
_HEADER = struct.Struct("!I")


class _Channel:
    """Length-prefixed pickled messages over a socket; one ``recv`` takes everything that is waiting."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = bytearray()
        self._ready: collections.deque = collections.deque()

    def send(self, message: Any, timeout_s: float = REPLY_TIMEOUT_S) -> None:
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        self.sock.settimeout(timeout_s)  # a receive may have left the socket non-blocking
        try:
            self.sock.sendall(_HEADER.pack(len(data)) + data)
        except socket.timeout as exc:
            raise EOFError(f"the other process took no message for {timeout_s:.0f} s") from exc

    def receive(self, timeout_s: float | None = None) -> Any:
        """The next message; None when ``timeout_s`` passes first; EOFError when the other side is gone."""
        while not self._ready:
            self.sock.settimeout(timeout_s)
            try:
                chunk = self.sock.recv(1 << 20)
            except (socket.timeout, BlockingIOError):
                return None
            except OSError as exc:
                raise EOFError(str(exc)) from exc
            if not chunk:
                raise EOFError("the other process closed the channel")
            self._buffer += chunk
            while len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if len(self._buffer) < _HEADER.size + size:
                    break
                self._ready.append(pickle.loads(self._buffer[_HEADER.size:_HEADER.size + size]))
                del self._buffer[:_HEADER.size + size]
        return self._ready.popleft()

    def unread(self, message: Any) -> None:
        self._ready.appendleft(message)


def _serve_decode(source, channel: _Channel) -> None:
    """Answer ``decode_text`` for token lists that are not a prefix of the current draft."""
    try:
        while True:
            channel.send(source.decode_text(channel.receive()))
    except (EOFError, OSError):
        return


def _child(factory: Callable[..., Any], args: tuple, niceness: int, control_sock, text_sock) -> None:
    """The child's loop: build the source, then prepare and draft jobs as the parent asks."""
    control, text = _Channel(control_sock), _Channel(text_sock)
    lower_thread_priority(niceness)  # before the source starts any thread: they all inherit it
    try:
        source = factory(*args)
    except Exception as exc:  # the parent raises it from its constructor
        control.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    languages = None if source.languages is None else sorted(source.languages)
    tasks = source.tasks if isinstance(source, TaskList) else None
    control.send(("ready", source.name, source.vocabulary, languages, int(source.eos_token),
                  None if tasks is None else sorted(tasks)))
    lifetimes.start_thread(_serve_decode, "as2d-drafter-text", source, text)  # ends when the parent closes its side
    job = None
    while True:
        try:
            message = control.receive()
        except EOFError:
            return
        kind, number = message[0], message[1]
        if kind == "prepare":
            _close(job)  # a job prepared but never drafted
            job = None
            _, _, request_fields, language, threads = message
            try:
                job = source.prepare(Request(**request_fields), language, threads)
                control.send(("prepared", number, None))
            except Exception as exc:
                control.send(("prepared", number, f"{type(exc).__name__}: {exc}"))
        elif kind == "draft":
            _draft(source, job, number, control)
            job = None
        elif kind == "close":
            _close(job)
            job = None


def _draft(source, job, number: int, control: _Channel) -> None:
    """Send each piece as it is drafted (with the history's text after each token); stop when asked."""
    history: list[int] = []
    try:
        for piece in job.pieces():
            texts = []
            for token in piece.tokens:
                history.append(int(token))
                texts.append(source.decode_text(history))
            control.send(("piece", number, piece.tokens, piece.confidences, piece.boundary, piece.span_s, texts))
            message = control.receive(timeout_s=0)
            if message is not None:  # "stop", or the parent has moved on: either way this draft is over
                if message[0] != "stop":
                    control.unread(message)  # a message for the main loop, never dropped
                control.send(("end", number, False, None))
                return
        control.send(("end", number, bool(job.ended_with_eos), None))
    except Exception as exc:
        control.send(("end", number, False, f"{type(exc).__name__}: {exc}"))
    finally:
        _close(job)


def _close(job) -> None:
    if job is not None:
        reported(job.close, "closing a drafter process's job")


class _Child:
    """One child process and its two channels (control, and decode_text for unusual token lists)."""

    def __init__(self, factory: Callable[..., Any], args: tuple, start_timeout_s: float, niceness: int):
        context = multiprocessing.get_context("spawn")  # never fork a parent that runs runtime threads
        control, child_control = socket.socketpair()
        text, child_text = socket.socketpair()
        self.process = context.Process(target=_child, args=(factory, args, niceness, child_control, child_text),
                                       name="as2d-drafter", daemon=True)
        self.process.start()
        self._owned = lifetimes.own_process(f"drafter process {self.process.pid}", self._end)
        child_control.close()
        child_text.close()
        self.control, self.text = _Channel(control), _Channel(text)
        self.text_lock = threading.Lock()
        self.busy = False  # a job was started and has not acknowledged its end
        try:
            reply = self.control.receive(start_timeout_s)
        except EOFError:
            reply = ("failed", f"it exited with code {self.process.exitcode}")
        if reply is None:
            self.kill()
            raise RuntimeError(f"the drafter process did not start within {start_timeout_s:.0f} s")
        if reply[0] == "failed":
            self.kill()
            raise RuntimeError(f"the drafter process could not build its source: {reply[1]}")
        self.info = reply[1:]

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        """End the child; a parent thread still reading its channel then gets EOFError."""
        self._owned.end()

    def _end(self) -> None:
        self.process.kill()
        self.process.join(5)


class ProcessSource:
    """Any source, run in a child process so that its runtime cannot share the target's GIL.

    ``factory(*args)`` builds the real source in the child; both must pickle
    (a module-level function and plain data); ``setup.plugins.registered_source`` builds a registered one.
    The child runs ``niceness`` nicer than the parent (0 by default: ``DecodeOptions.drafter_nice``
    is per request, while the child lives across requests).
    """

    one_job_at_a_time = True  # capabilities.OneJobAtATime: its child serves one job at a time

    def __init__(self, factory: Callable[..., Any], *args: Any, name: str | None = None,
                 start_timeout_s: float = 300.0, reply_timeout_s: float = REPLY_TIMEOUT_S,
                 niceness: int = 0):
        self._factory, self._args, self._start_timeout_s = factory, args, start_timeout_s
        self._niceness = niceness
        self.reply_timeout_s = reply_timeout_s
        self._jobs = 0
        self._lock = threading.Lock()
        self._child = _Child(factory, args, start_timeout_s, niceness)
        inner_name, self.vocabulary, languages, self.eos_token, tasks = self._child.info
        self.name = name or inner_name
        self.languages = None if languages is None else frozenset(languages)
        self.tasks = None if tasks is None else frozenset(tasks)  # None: the source drafts any task
        self._history: list[int] = []  # the drafting job's tokens so far
        self._texts: list[str] = []  # text of self._history[:i + 1]

    def decode_text(self, tokens: Sequence[int]) -> str:
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        if 0 < n <= len(self._history) and self._history[:n] == tokens:
            return self._texts[n - 1]
        child = self._child
        with child.text_lock:
            child.text.send(tokens)
            text = child.text.receive(self.reply_timeout_s)
        if text is None:
            child.busy = True  # replaced at the next prepare
            raise TimeoutError(f"the drafter process decoded no text within {self.reply_timeout_s:.0f} s")
        return text

    def prepare(self, request: Request, language: str, threads: int) -> "ProcessDraftJob":
        with self._lock:
            self._jobs += 1
            number = self._jobs
            try:
                child = self._ready_child()
                child.control.send(("prepare", number, request.fields(), language, threads))
                reply = _receive(child, number, "prepared", self._start_timeout_s)
                error = reply[2]
            except Exception as exc:
                child, error = None, f"{type(exc).__name__}: {exc}"
            return ProcessDraftJob(self, child, number, error)

    def _ready_child(self) -> _Child:
        """The current child, or a fresh one when it died or is still stuck in an abandoned job."""
        child = self._child
        if child.alive() and not child.busy:
            return child
        child.kill()
        self._child = _Child(self._factory, self._args, self._start_timeout_s, self._niceness)
        return self._child

    def _new_draft(self) -> None:
        self._history, self._texts = [], []

    def _add_to_draft(self, tokens: Sequence[int], texts: Sequence[str]) -> None:
        self._history.extend(int(t) for t in tokens)
        self._texts.extend(texts)

    def close(self) -> None:
        self._child.kill()


def _receive(child: _Child, number: int, kind: str, timeout_s: float):
    """The next message of job ``number`` within ``timeout_s`` in all (older jobs' messages are dropped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        message = child.control.receive(max(0.0, deadline - time.monotonic()))
        if message is None:
            raise TimeoutError(f"the drafter process sent no {kind!r} within {timeout_s:.1f} s")
        if message[1] == number:
            return message


class ProcessDraftJob:
    """The parent's view of one job in the child: pieces arrive as the child drafts them."""

    def __init__(self, source: ProcessSource, child: _Child | None, number: int, error: str | None):
        self._source, self._child, self._number, self._error = source, child, number, error
        self._started = self._ended = False
        self.ended_with_eos = False

    def pieces(self) -> Iterator[DraftPiece]:
        if self._error is not None:
            raise RuntimeError(f"drafter process: {self._error}")
        child = self._child
        child.busy = True
        self._source._new_draft()
        while True:
            try:
                if not self._started:
                    self._started = True
                    child.control.send(("draft", self._number))
                message = _receive(child, self._number, "piece", self._source.reply_timeout_s)
            except TimeoutError as exc:  # busy stays set: the stalled child is replaced at the next prepare
                raise RuntimeError(f"{exc}; it is stalled and will be replaced") from None
            except (EOFError, OSError):
                self._ended = True
                raise RuntimeError("the drafter process died") from None
            if message[0] == "end":
                self._ended, child.busy = True, False
                self.ended_with_eos = message[2]
                if message[3] is not None:
                    raise RuntimeError(f"drafter process: {message[3]}")
                return
            _, _, tokens, confidences, boundary, span_s, texts = message
            self._source._add_to_draft(tokens, texts)
            yield DraftPiece(tokens=tokens, confidences=confidences, boundary=boundary, span_s=span_s)

    def close(self) -> None:
        """Stop the child's job and wait briefly for its end; a child that does not stop is replaced later."""
        child = self._child
        if child is None or self._ended:
            return
        try:
            if not self._started:
                child.control.send(("close", self._number))
                return
            child.control.send(("stop", self._number))
            while _receive(child, self._number, "end", STOP_TIMEOUT_S)[0] != "end":
                pass
            child.busy = False
        except (EOFError, OSError, TimeoutError):
            pass
