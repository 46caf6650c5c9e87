"""Windows decoded side by side, their verifications gathered into one call of the target (``WindowBatching``).

The windows of a file are decoded in waves of the group's size. Each window runs the one target loop
of every method, unchanged, in a thread of its own. Its session joins the wave's rendezvous when it is
prepared, and its ``verify`` waits there until every window of the wave has joined and every one
still decoding has asked; the last to ask makes one call of the group for all of them
(``WindowGroup.verify_rows``). A window leaves when its session closes, and the others stop waiting
for it. Every row gets the tokens its own call would give (the group's contract), so every method
stays exact; what changes is how many calls the target makes. Measured in BENCHMARKS.md section 14:
windows that verify while others encode share few calls, so a wave's windows are all prepared first.

Beam search gathers the same way (``BeamsTogether``): each window's search runs ``run_beam_request`` unchanged,
and every step of its rows waits at the wave's rendezvous for one call of the target's ``BeamWave``.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from as2d_core.capabilities import BeamRows, BeamWave, WindowGroup
from as2d_core.contracts import Request, Target, TargetSession
from as2d_core.decode.wrappers import SessionWrapper, TargetWrapper


class Rendezvous:
    """Where the sessions of a wave meet: each asks, and once every member has asked one ``call`` answers all
    (``call(asks)``: each ask's answer, in order; the group's ``verify_rows``, a beam wave's ``step``)."""

    def __init__(self, call: Callable[[list[tuple]], list], expected: int) -> None:
        self._call = call
        self._ready = threading.Condition()
        self._expected = expected  # windows of the wave not joined yet
        self._members: set[int] = set()  # sessions that verify together, by id
        self._asked: dict[int, tuple] = {}
        self._answers: dict[int, object] = {}

    def join(self, session: TargetSession) -> None:
        """``session`` (prepared) verifies with the others from now on."""
        with self._ready:
            self._members.add(id(session))
            self._expected -= 1
            self._answer_if_all_asked()

    def abandon(self) -> None:
        """A window of the wave failed before it joined: nobody waits for it."""
        with self._ready:
            self._expected -= 1
            self._answer_if_all_asked()

    def verify(self, session: TargetSession, root: int, candidates: Sequence[int]) -> list[int]:
        """``session``'s predictions, from the first call made once every member has asked."""
        return self.ask(session, root, candidates)

    def ask(self, session: TargetSession, *asked):
        """The answer to ``(session, *asked)`` from the first call made once every member has asked."""
        key = id(session)
        with self._ready:
            self._asked[key] = (session, *asked)
            self._answer_if_all_asked()
            while key not in self._answers:
                self._ready.wait()
            answer = self._answers.pop(key)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def leave(self, session: TargetSession) -> None:
        """``session`` verifies no more: the others stop waiting for it."""
        with self._ready:
            self._members.discard(id(session))
            self._answer_if_all_asked()

    def _answer_if_all_asked(self) -> None:
        """Under the lock: one group call once every member waits (a failed call fails each of its rows)."""
        if not self._asked or self._expected > 0 or len(self._asked) < len(self._members):
            return
        keys, rows = list(self._asked), list(self._asked.values())
        self._asked.clear()
        try:
            answers: list = self._call(rows)
        except BaseException as exc:  # every waiting window hears it, none hangs
            answers = [exc] * len(rows)
        self._answers.update(zip(keys, answers))
        self._ready.notify_all()


class GatheredSession(SessionWrapper):
    """A group's session whose verifications go where the group's rows meet (a wave's rendezvous, or the
    scheduler: anything with ``verify(session, root, candidates)`` and ``leave(session)``)."""

    def __init__(self, inner: TargetSession, rendezvous: Rendezvous) -> None:
        super().__init__(inner)
        self._rendezvous = rendezvous

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        return self._rendezvous.verify(self.inner, root, candidates)

    def close(self) -> None:
        try:
            self._rendezvous.leave(self.inner)
        finally:
            self.inner.close()


class WindowsTogether(TargetWrapper):
    """``target`` for one wave of ``windows`` concurrent ``run_request`` calls (at most the group's size): each
    request is prepared into the group and verified at the wave's rendezvous."""

    def __init__(self, target: Target, group: WindowGroup, windows: int) -> None:
        super().__init__(target)
        self.group = group
        self.rendezvous = Rendezvous(group.verify_rows, windows)

    def prepare(self, request: Request, threads: int) -> TargetSession:
        try:
            session = self.group.prepare(request, threads)
        except BaseException:
            self.rendezvous.abandon()
            raise
        self.rendezvous.join(session)
        return GatheredSession(session, self.rendezvous)


class BeamPlace(Protocol):
    """Where a session's beam rows step with others' (a file's wave, the scheduler's waves)."""

    def rows(self, session: TargetSession, width: int) -> BeamRows | None:
        """``session``'s ``width`` rows there, each step one call with the others' (None: it has no room for
        them, and the session's own rows search alone)."""

    def leave(self, session: TargetSession) -> None:
        """``session``'s rows step there no more: the others stop waiting for them (once or more)."""


class BeamsTogether(TargetWrapper):
    """``target`` for one wave of ``windows`` concurrent ``run_beam_request`` calls: each request is prepared as
    alone and joins the wave's rendezvous; its beam rows are the wave's (``BeamWave.rows``), whose every step
    waits there for one call of all the wave's rows."""

    def __init__(self, target: Target, wave: BeamWave, windows: int) -> None:
        super().__init__(target)
        self.wave = wave
        self.rendezvous = Rendezvous(wave.step, windows)
        self._preparing = threading.Lock()  # one window's encoder at a time, on all the threads

    def prepare(self, request: Request, threads: int) -> TargetSession:
        try:
            with self._preparing:
                session = self.inner.prepare(request, threads)
        except BaseException:
            self.rendezvous.abandon()
            raise
        self.rendezvous.join(session)
        return BeamWaveSession(session, self)

    def rows(self, session: TargetSession, width: int) -> BeamRows:
        return self.wave.rows(session, width, lambda staged: self.rendezvous.ask(session, staged))

    def leave(self, session: TargetSession) -> None:
        self.rendezvous.leave(session)


class BeamWaveSession(SessionWrapper):
    """A session whose beam rows step where others' do (``place``); it leaves that place when its rows or itself
    close, and before anything else it does (a greedy decode, sampled rows) that a wave cannot serve."""

    def __init__(self, inner: TargetSession, place: BeamPlace) -> None:
        super().__init__(inner)
        self._place = place
        self.beam_rows = self._rows_in_wave  # not the inner session's own, which the wrapper forwards

    def _rows_in_wave(self, width: int, as_verified: bool = False) -> BeamRows:
        place, inner = self._place, self.inner
        if as_verified:  # rows scored as the session verifies: its own, outside the wave
            place.leave(inner)
            return inner.beam_rows(width, as_verified)
        try:
            rows = place.rows(inner, width)
        except BaseException:
            place.leave(inner)
            raise
        if rows is None:
            return inner.beam_rows(width)
        return _LeavingRows(rows, lambda: place.leave(inner))

    def verify(self, root: int, candidates: Sequence[int]) -> list[int]:
        self._place.leave(self.inner)
        return self.inner.verify(root, candidates)

    def close(self) -> None:
        try:
            self._place.leave(self.inner)
        finally:
            self.inner.close()


class _LeavingRows:
    """A wave's rows that leave its rendezvous when closed, so the other windows stop waiting for them."""

    def __init__(self, rows: BeamRows, leave: Callable[[], None]) -> None:
        self._rows, self._leave = rows, leave
        self.width = rows.width

    def first_logits(self):
        return self._rows.first_logits()

    def advance(self, rows):
        return self._rows.advance(rows)

    def close(self) -> None:
        try:
            self._rows.close()
        finally:
            self._leave()
