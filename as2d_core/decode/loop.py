"""The one target loop of every method: propose, verify in one call, commit the target's own greedy tokens.

Candidates, whoever proposes them, only decide how many tokens a call checks, so every method
is exact by construction. Target-only decoding is this loop with a proposer that proposes nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import attrs
import time

from as2d_core.contracts import TargetSession
from as2d_core.decode.events import Event, EventLog

# Hears each verification's newly committed tokens, with the session (their text: ``decode_text``).
OnCommit = Callable[[TargetSession, list[int]], None]


@attrs.define
class Counters:
    """Verification bookkeeping shared by the engine and the serial baselines."""

    proposed: int = 0
    accepted: int = 0
    verify_calls: int = 0
    widths: list[int] = attrs.Factory(list)
    target_only_steps: int = 0


def verify_and_commit(
    session: TargetSession, root: int, candidates: list[int], events: EventLog, counters: Counters
) -> tuple[list[int], int, Event]:
    """One target call: verify ``root`` and ``candidates``, cut rejected entries out of the cache, count it.

    Returns the greedy predictions, how many candidates matched them, and the
    call's event. The engine and the serial baselines share it, so every method
    commits by the same rule.
    """
    cache_before = session.cache_length
    start = time.perf_counter()
    predictions = session.verify(root, candidates)
    accepted = 0
    while accepted < len(candidates) and candidates[accepted] == predictions[accepted]:
        accepted += 1
    if accepted < len(candidates):
        session.truncate(cache_before + 1 + accepted)
    event = events.add("verify" if candidates else "step", start, tokens=accepted + 1, width=len(candidates) + 1)
    if candidates:
        counters.verify_calls += 1
        counters.widths.append(len(candidates) + 1)
        counters.proposed += len(candidates)
        counters.accepted += accepted
    else:
        counters.target_only_steps += 1
    return predictions, accepted, event


def extend_until_eos(response: list[int], committed: list[int], eos_token: int) -> bool:
    """Append accepted candidates to ``response``; True when they hold the end token (the response is complete)."""
    if eos_token in committed:
        response.extend(committed[: committed.index(eos_token)])
        return True
    response.extend(committed)
    return False


class Proposer(Protocol):
    """Chooses the candidates of one verification: the only part of the target loop that differs by method.

    The engine's decoupled proposer reads the published record; the serial baselines draft from the
    committed prefix; replay reads a priced record. Every method then verifies and commits the same way.
    """

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        """Up to ``limit`` candidates to follow ``root`` (the last of ``response``), and trace fields."""

    def settle(self, accepted: int) -> None:
        """The verification accepted ``accepted`` of the proposed candidates."""


class TargetOnly:
    """No candidates: the target decodes one token per call."""

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        return [], {"anchor": None, "published": 0}

    def settle(self, accepted: int) -> None:
        pass



def target_loop(
    session: TargetSession,
    proposer: Proposer,
    events: EventLog,
    counters: Counters,
    trace: list[dict] | None = None,
    on_commit: OnCommit | None = None,
) -> list[int]:
    """Greedy decoding of one response, the one loop of every method.

    Candidates, whoever proposes them, only decide how many tokens a call checks: each call
    commits the target's own greedy tokens (``verify_and_commit``), so the output is exact.
    ``on_commit`` hears the tokens each call commits as soon as they are verified (a committed
    token is final, so a listener never has to take one back); without it the loop does no more.
    """
    response: list[int] = []
    told = 0  # committed tokens handed to on_commit
    root = session.first_token()
    while root != session.eos_token and len(response) < session.max_new_tokens:
        response.append(root)
        if on_commit is not None:  # the root and the candidates accepted before it
            on_commit(session, response[told:])
            told = len(response)
        room = session.max_new_tokens - len(response)  # tokens still allowed after the root
        if room <= 0:
            break
        candidates, fields = proposer.propose(response, root, room - 1)
        predictions, accepted, event = verify_and_commit(session, root, candidates, events, counters)
        if trace is not None:
            trace.append({"kind": event.kind, "start": event.start, "end": event.end, "root": root,
                          "candidates": candidates, "accepted": accepted, "next": predictions[accepted], **fields})
        proposer.settle(accepted)
        if extend_until_eos(response, candidates[:accepted], session.eos_token):
            break
        root = predictions[accepted]
    response = response[: session.max_new_tokens]
    if on_commit is not None and len(response) > told:
        on_commit(session, response[told:])
    return response


def greedy_reference(session: TargetSession, max_new_tokens: int | None = None) -> list[int]:
    """Plain greedy decoding, one token per call, straight on the session API.

    The reference the engine's loop is checked against: it shares no code with it.
    """
    limit = session.max_new_tokens if max_new_tokens is None else max_new_tokens
    tokens = [session.first_token()]
    while tokens[-1] != session.eos_token and len(tokens) < limit:
        tokens.append(session.verify(tokens[-1], [])[0])
    return tokens[:-1] if tokens[-1] == session.eos_token else tokens
