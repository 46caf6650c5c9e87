"""How a target chooses each token: greedy, or sampling that is a deterministic function of the logits and a seed.

Speculation stays exact only if the token after a position does not depend on how many tokens the call
that scored it checked. Greedy decoding has that property. Sampling gets it here by the Gumbel-max trick:
the token after response position ``i`` is ``argmax(logits / T + g)``, where ``g`` is Gumbel noise drawn
from ``(seed, i)`` alone. That is a draw from ``softmax(logits / T)``, and a target that scores a position
alone or inside a batched verification draws the same token, so a drafter's proposals are verified
against sampled tokens exactly as against greedy ones, and target-only decoding with the same seed gives
the same tokens.
"""
from __future__ import annotations

import zlib

import attrs
import numpy as np


@attrs.frozen
class Sampling:
    """The decoding mode of one response: temperature 0 is greedy; above it, seeded Gumbel-max sampling."""

    temperature: float = attrs.field(default=0.0, validator=attrs.validators.ge(0.0))
    seed: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def choose(self, rows: np.ndarray, first_position: int) -> list[int]:
        """The token after each row of logits ``[K, vocab]``; row ``j`` scores response position
        ``first_position + j`` (0: the first response token)."""
        if self.greedy:
            return [int(t) for t in np.argmax(rows, axis=-1)]
        return [int(np.argmax(row.astype(np.float64) / self.temperature + self.noise(first_position + j, row.size)))
                for j, row in enumerate(rows)]

    def noise(self, position: int, size: int) -> np.ndarray:
        """Gumbel noise for one position, drawn from ``(seed, position)`` only."""
        return np.random.Generator(np.random.PCG64([self.seed, position])).gumbel(size=size)


GREEDY = Sampling()


def derive_seed(seed: int, *parts: object) -> int:
    """A seed for one decode call of a longer job (a segment, a fallback temperature, a best-of sample), so each
    call draws its own noise and the same job with the same ``seed`` draws the same noise again."""
    return zlib.crc32(repr((seed, *parts)).encode()) & 0x7FFF_FFFF
