"""The serial kind (standard speculative decoding): a prefix-conditioned drafter drafts from the committed
prefix before each verification, taking turns with the target, under the method's ``SerialPolicy``."""
from __future__ import annotations

from as2d_core.contracts import TargetSession
from as2d_core.decode.kinds.base import Drafting
from as2d_core.decode.loop import Proposer, TargetOnly
from as2d_core.decode.serial import PrefixDrafter, SerialProposer, check_prefix_drafting, open_prefix_session


class SerialDrafting(Drafting):
    def __init__(self, *args) -> None:
        super().__init__(*args)
        check_prefix_drafting(self.source)
        self.policy = self.drafter = self._proposer = None

    def after_prepare(self, session: TargetSession, speculative: bool) -> None:
        """Opens the drafter's prefix session on the target's threads (the two take turns)."""
        super().after_prepare(session, speculative)
        if not speculative:
            return
        self.policy = self.method.serial.for_budget(self.options.budget)
        try:
            drafter_session = open_prefix_session(self.source, self.request, session.language,
                                                  self.options.target_threads)
        except BaseException:
            session.close()
            raise
        self.drafter = PrefixDrafter(drafter_session, session, self.source.vocabulary == self.target.vocabulary)

    def proposer(self, session: TargetSession, timestamps, trace: list[dict]) -> Proposer:
        if self.drafter is None:
            return TargetOnly()
        self._proposer = SerialProposer(self.drafter, self.policy, self.events, trace)
        return self._proposer

    def close(self) -> list:
        if self.drafter is not None:
            self.drafter.s.close()
        return []

    def result_fields(self) -> dict:
        drafting = self.drafter is not None
        return {**super().result_fields(),
                "budget": self.policy.proposals if drafting else self.options.budget if self.speculative else None,
                "published": self._proposer.published if self._proposer is not None else 0}
