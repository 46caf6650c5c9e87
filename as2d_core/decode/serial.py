"""Serial drafting on the engine's contracts: standard SD, SpecASR's ASP, as2d-no-td.

Drafting and verification take turns on one thread, each on all the cores.
The drafter is a prefix-conditioned session (``capabilities.PrefixDrafting``), a
TargetSession in the drafter's vocabulary. Before each round it is brought in
step with the target's committed prefix: for another vocabulary the committed
text is re-encoded into drafter ids and only the part of its cache that
differs is recomputed. That catch-up, the drafting and the conversion of the
draft into target ids are all "draft" events, so ``decompose`` charges them to D.
The loop is the engine's own ``target_loop`` with a :class:`SerialProposer`:
root plus candidates in one call, commit the matching greedy prefix plus the
target's own next token, cut the rest out of the cache; so every serial method
returns exactly the target's greedy tokens.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from as2d_core.capabilities import PrefixDrafting, ScoredSession
from as2d_core.contracts import Request, Source, TargetSession

if TYPE_CHECKING:
    from as2d_core.decode.events import EventLog


class BaselineUnavailable(RuntimeError):
    """The source cannot be run as a prefix-conditioned drafter."""


@attrs.frozen
class SerialPolicy:
    """How many drafter tokens a round proposes and whether old drafts are recycled."""

    proposals: int | None  # drafter tokens per round at most (K - 1 for fixed-width SD); None: the request's budget
    threshold: float | None = None  # stop after the first token whose confidence is below this
    recycle: bool = False  # reuse the rejected draft where it realigns (SpecASR chain variant)

    def for_budget(self, budget: int) -> SerialPolicy:
        """This policy with a number of proposals: its own, or ``budget`` when it drafts up to the request's."""
        return self if self.proposals is not None else attrs.evolve(self, proposals=budget)


def check_prefix_drafting(source: Source) -> None:
    """Refuse a source that cannot be brought in step with the target's prefix, before any work."""
    if not isinstance(source, PrefixDrafting):
        raise BaselineUnavailable(
            f"source {source.name} offers no prefix-conditioned session (capabilities.PrefixDrafting); "
            "serial methods need one")


def open_prefix_session(source: Source, request: Request, language: str, threads: int) -> TargetSession:
    check_prefix_drafting(source)
    return source.prefix_session(request, language, threads)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PrefixDrafter:
    """A prefix-conditioned drafter kept in step with the target's committed prefix.

    ``cached`` mirrors the drafter's cache (response tokens) and ``next`` is its
    greedy token after them with that token's probability, so ``cached + [next]``
    is always what the drafter would say next.
    """

    def __init__(self, session: TargetSession, target_session: TargetSession, same_vocabulary: bool) -> None:
        self.s = session
        self.t = target_session
        self.same_vocabulary = same_vocabulary
        self.cached: list[int] = []
        self.next: tuple[int, float | None] | None = None
        self.old: tuple[list[int], list[int], list[float | None]] | None = None  # ctx, draft, confidences
        self.recycled = 0  # drafter tokens reused from rejected drafts
        self.scored = isinstance(session, ScoredSession)

    # -- drafter calls -------------------------------------------------------------------
    def _call(self, root: int, candidates: Sequence[int]) -> tuple[list[int], list[float | None]]:
        if self.scored:
            tokens, confidences = self.s.verify_with_confidence(root, candidates)
            return list(tokens), list(confidences)
        tokens = self.s.verify(root, candidates)
        return list(tokens), [None] * len(tokens)

    def _first(self) -> tuple[int, float | None]:
        return self.s.first_token(), (self.s.first_token_confidence() if self.scored else None)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens to the drafter's cache in one call."""
        predicted, confidences = self._call(tokens[0], tokens[1:])
        self.cached.extend(int(t) for t in tokens)
        self.next = (predicted[-1], confidences[-1])

    def sync(self, context: list[int]) -> None:
        """Make the drafter's cache hold ``context``, recomputing only where it differs (the catch-up)."""
        keep = _common_prefix(self.cached, context)
        if keep == len(context) == len(self.cached) and self.next is not None:
            return
        if not context:
            self.s.truncate(0)
            self.cached, self.next = [], self._first()
            return
        keep = min(keep, len(context) - 1)  # re-feed at least the last token to get a prediction
        self.s.truncate(keep)
        self.cached = self.cached[:keep]
        self.extend(context[keep:])

    # -- vocabularies --------------------------------------------------------------------
    def context(self, committed: Sequence[int]) -> list[int]:
        """The committed target prefix (root included) in drafter ids."""
        if self.same_vocabulary:
            return [int(t) for t in committed]
        return list(self.s.encode_text(self.t.decode_text(committed)))

    def to_target(self, context: list[int], drafted: Sequence[int]) -> list[int]:
        """Target ids of the draft's continuation text; a drafted end token becomes the target's."""
        body = list(drafted)
        ended = self.s.eos_token in body
        if ended:
            body = body[: body.index(self.s.eos_token)]
        if self.same_vocabulary:
            out = body
        else:
            base = self.s.decode_text(context)
            full = self.s.decode_text(context + body)
            cut = len(base) if full.startswith(base) else len(os.path.commonprefix([base, full]))
            text = full[cut:].rstrip("\ufffd")  # an unfinished multi-byte character cannot be proposed
            out = list(self.t.encode_text(text)) if text else []
        return out + [self.t.eos_token] if ended else out

    # -- one round -----------------------------------------------------------------------
    def _recycle(self, context: list[int], threshold: float | None, limit: int) -> tuple[list[int], list]:
        """Reuse the rejected draft from where the drafter's new token realigns with it (same or adjacent position)."""
        if self.old is None or self.next is None:
            return [], []
        first, first_conf = self.next
        if threshold is not None and first_conf is not None and first_conf < threshold:
            return [], []  # the new first token already ends the round
        old_context, old_draft, old_conf = self.old
        full = old_context + old_draft
        diverged = _common_prefix(full, context)
        for p in (len(context), len(context) - 1, len(context) + 1):
            if max(diverged, len(old_context)) <= p < len(full) - 1 and full[p] == first:
                reused, confidences = [], []
                for i in range(p + 1, len(full)):
                    if len(reused) + 1 >= limit or full[i] == self.s.eos_token:
                        break
                    conf = old_conf[i - len(old_context)]
                    reused.append(full[i])
                    confidences.append(conf)
                    if threshold is not None and conf is not None and conf < threshold:
                        break
                return reused, confidences
        return [], []

    def draft(self, context: list[int], limit: int, threshold: float | None, recycle: bool) -> list[int]:
        """Up to ``limit`` drafter tokens after ``context`` (stopping after a low-confidence or end token)."""
        room = self.s.max_new_tokens - 1
        if limit <= 0 or len(context) >= room:
            return []
        self.sync(context)
        drafted: list[int] = []
        confidences: list[float | None] = []
        if recycle:
            reused, reused_conf = self._recycle(context, threshold, min(limit, room - len(context)))
            if reused:
                first, first_conf = self.next
                # Refresh the reused suffix's cache under the corrected prefix in one batch.
                self.extend([first, *reused])
                drafted, confidences = [first, *reused], [first_conf, *reused_conf]
                self.recycled += len(reused)
                last = reused_conf[-1]
                if threshold is not None and last is not None and last < threshold:
                    limit = len(drafted)  # the reused draft already stopped on a low-confidence token
        while len(drafted) < limit and len(self.cached) < room:
            token, conf = self.next
            drafted.append(token)
            confidences.append(conf)
            stop = token == self.s.eos_token or (threshold is not None and conf is not None and conf < threshold)
            if stop or len(drafted) >= limit or len(self.cached) + 1 >= room:
                break
            self.extend([token])
        self.old = (list(context), drafted, confidences)
        return drafted


class SerialProposer:
    """The serial methods' proposal step: a drafting turn from the committed prefix before each call.

    The drafting (catch-up, draft, conversion to target ids) is a "draft" event and a "draft" trace
    entry, so ``decompose`` charges it to D and a trace shows when each round's candidates appeared.
    """

    def __init__(self, drafter: PrefixDrafter, policy: SerialPolicy, events: EventLog, trace: list[dict]) -> None:
        self.drafter = drafter
        self.policy = policy
        self.events = events
        self.trace = trace
        self.published = 0

    def propose(self, response: list[int], root: int, limit: int) -> tuple[list[int], dict]:
        limit = min(self.policy.proposals, limit)
        if limit <= 0:
            return [], {}
        start = time.perf_counter()
        context = self.drafter.context(response)
        drafted = self.drafter.draft(context, self.policy.proposals, self.policy.threshold, self.policy.recycle)
        candidates = self.drafter.to_target(context, drafted)[:limit]
        event = self.events.add("draft", start, tokens=len(drafted))
        self.trace.append({"kind": "draft", "start": start, "end": event.end, "drafted": len(drafted),
                           "candidates": candidates, "offset": self.published})
        self.published += len(candidates)
        return candidates, {}

    def settle(self, accepted: int) -> None:
        pass
