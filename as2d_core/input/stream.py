"""Sustained streams (the paper's Appendix D.6.2): audio arrives in blocks, models stay resident.

Each block is one request over the current context view: the audio that has arrived
since the last reset, at most ``context_s`` long; then the view resets (the models stay
loaded). The drafter reads only that view, so only audio that has arrived. A block's
committed text is the target's verified output on its view, printed when the block
completes; the view's last block gives the final text of those seconds. The core's
``Request`` carries no text prefix, so earlier committed text is not fed back as a prompt.

Timings per block follow the paper: queue wait (from the block's last sample to the
start of its processing), preparation (the target's encoder and prefill, with the
drafter's audio encoding), decode, and completion lag (from the block's last sample to
its committed output). The run summary gives active RTF (serial processing time over
audio duration), resource RTF (elapsed time from the first sample to the last output
over audio duration), decode TPS and the p50/p95 completion lag.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs
import numpy as np

from as2d_core.contracts import SAMPLE_RATE, Request
from as2d_core.decode.result import DecodeResult
from as2d_core.input.audio import mono_samples

if TYPE_CHECKING:
    from as2d_core.input.pipeline import Pipeline

BLOCK_S = 4.0  # seconds of audio per block, by default
CONTEXT_S = 12.0  # how long the context view grows before it resets, by default
PACES = ("realtime", "fast")  # how a recording replayed as a stream arrives (``StreamSession.replay``)


@attrs.define
class BlockResult:
    index: int
    view_start_s: float  # stream time the view starts at
    end_s: float  # stream time of the block's last sample
    arrived_at: float  # perf_counter() when the block's last sample arrived
    started_at: float
    finished_at: float
    result: DecodeResult
    request: Request = attrs.field(repr=False)
    final: bool = False  # the last block of its view (or of the stream): its text stands for the view's seconds
    exact: bool | None = None

    @property
    def text(self) -> str:
        return self.result.text.strip()

    @property
    def queue_wait_s(self) -> float:
        return max(0.0, self.started_at - self.arrived_at)

    @property
    def lag_s(self) -> float:
        return self.finished_at - self.arrived_at

    @property
    def service_s(self) -> float:
        return self.finished_at - self.started_at

    def as_dict(self) -> dict:
        r = self.result
        out = {
            "block": self.index, "view_start_s": self.view_start_s, "end_s": self.end_s, "text": self.text,
            "final": self.final, "tokens": len(r.tokens), "method": r.method, "queue_wait_s": self.queue_wait_s,
            "prepare_s": r.prepare_s, "decode_s": r.decode_s, "service_s": self.service_s, "lag_s": self.lag_s,
            "tps": r.tps, "accepted": r.accepted, "proposed": r.proposed, "producer_error": r.producer_error,
        }
        if r.words_s is not None:  # --word-timestamps: the view's words, in the stream's time
            out["words"] = [word.shifted(self.view_start_s).as_dict() for word in r.words]
            out["words_s"] = r.words_s
        if self.exact is not None:
            out["exact"] = self.exact
        return out


class StreamSession:
    """Feed samples as they arrive; every complete block is decoded at once and returned."""

    def __init__(self, pipeline: "Pipeline", block_s: float, context_s: float, check: bool = False):
        if block_s <= 0 or context_s < block_s:
            raise ValueError(f"need 0 < block ({block_s} s) <= context ({context_s} s)")
        if block_s > pipeline.options.max_window_s or context_s > pipeline.options.max_window_s:
            raise ValueError(f"blocks and context views must fit in one {pipeline.options.max_window_s:g} s window")
        self.pipeline = pipeline
        self.block = int(round(block_s * SAMPLE_RATE))
        self.context = int(round(context_s * SAMPLE_RATE))
        self.check = check
        self.blocks: list[BlockResult] = []
        self._pending = np.zeros(0, np.float32)  # arrived, not yet a whole block
        self._view = np.zeros(0, np.float32)
        self._consumed = 0  # samples of the stream already in blocks
        self._first_arrival: float | None = None
        self._finished_at: float | None = None

    def begin(self, at: float | None = None) -> None:
        """The stream starts now (or at perf_counter() ``at``): resource RTF counts from here."""
        self._first_arrival = time.perf_counter() if at is None else at

    def feed(self, samples: np.ndarray, arrived_at: float | None = None) -> list[BlockResult]:
        """Add samples; ``arrived_at`` (perf_counter) is when the last of them arrived (default: now)."""
        return self._add(mono_samples(samples), arrived_at)

    def _add(self, samples: np.ndarray, arrived_at: float | None) -> list[BlockResult]:
        """``feed`` on samples already checked (``mono_samples``)."""
        arrived_at = time.perf_counter() if arrived_at is None else arrived_at
        if self._first_arrival is None:  # not begun: the first samples took their own duration to arrive
            self._first_arrival = arrived_at - samples.size / SAMPLE_RATE
        self._pending = np.concatenate([self._pending, samples])
        done = []
        while self._pending.size >= self.block:
            block, self._pending = self._pending[: self.block], self._pending[self.block :]
            done.append(self._process(block, arrived_at))
        return done

    def replay(self, samples: np.ndarray, pace: str = "realtime") -> Iterator[BlockResult]:
        """Feed a recording block by block, as a stream would bring it, and yield each block as it completes.

        ``realtime``: each block arrives at its real time; ``fast``: as soon as the previous one is done.
        """
        if pace not in PACES:
            raise ValueError(f"pace must be one of {', '.join(PACES)}, got {pace!r}")
        samples = mono_samples(samples)
        start = time.perf_counter()
        self.begin(start)
        for offset in range(0, samples.size, self.block):
            chunk = samples[offset : offset + self.block]
            arrival = time.perf_counter()
            if pace == "realtime":
                arrival = start + (offset + chunk.size) / SAMPLE_RATE
                time.sleep(max(0.0, arrival - time.perf_counter()))
            done = self._add(chunk, arrival)  # checked once above, whole
            if offset + chunk.size >= samples.size:  # the recording's end: its last block is yielded as final
                done += self.finish()
            yield from done
        if samples.size == 0:
            yield from self.finish()

    def finish(self, arrived_at: float | None = None) -> list[BlockResult]:
        """The stream ended: decode what is left, then the target-only checks if asked."""
        done = []
        if self._pending.size:
            block, self._pending = self._pending, np.zeros(0, np.float32)
            done.append(self._process(block, time.perf_counter() if arrived_at is None else arrived_at))
        if self.blocks:
            self.blocks[-1].final = True
        self._finished_at = self.blocks[-1].finished_at if self.blocks else None
        if self.check:
            for b in self.blocks:
                b.exact = b.result.tokens == self.pipeline.reference(b.request).tokens
        return done

    def _process(self, block: np.ndarray, arrived_at: float) -> BlockResult:
        if self._view.size + block.size > self.context:
            self._view = np.zeros(0, np.float32)
        self._view = np.concatenate([self._view, block])
        self._consumed += block.size
        index = len(self.blocks)
        request = self.pipeline.request(f"stream-b{index:04d}", self._view)
        with self.pipeline.locked():
            started = time.perf_counter()
            result = self.pipeline.decode(request)
            finished = time.perf_counter()
        out = BlockResult(index, (self._consumed - self._view.size) / SAMPLE_RATE, self._consumed / SAMPLE_RATE,
                          arrived_at, started, finished, result, request,
                          final=self._view.size + self.block > self.context)  # the next block starts a new view
        self.blocks.append(out)
        return out

    @property
    def text(self) -> str:
        """The stream's transcript: each view's last block."""
        return " ".join(b.text for b in self.blocks if b.final and b.text)

    def summary(self) -> dict:
        blocks = self.blocks
        audio_s = self._consumed / SAMPLE_RATE
        lags = np.array([b.lag_s for b in blocks]) if blocks else np.zeros(1)
        decode_s = sum(b.result.decode_s for b in blocks)
        tokens = sum(len(b.result.tokens) for b in blocks)
        active_s = sum(b.service_s for b in blocks)
        elapsed = (self._finished_at or time.perf_counter()) - (self._first_arrival or time.perf_counter())
        out = {
            "summary": True,
            "method": self.pipeline.options.method,
            "blocks": len(blocks),
            "audio_s": audio_s,
            "text": self.text,
            "active_rtf": active_s / audio_s if audio_s else None,
            "resource_rtf": elapsed / audio_s if audio_s else None,
            "decode_tps": tokens / decode_s if decode_s > 0 else 0.0,
            "mean_prepare_s": float(np.mean([b.result.prepare_s for b in blocks])) if blocks else None,
            "mean_decode_s": float(np.mean([b.result.decode_s for b in blocks])) if blocks else None,
            "mean_service_s": active_s / len(blocks) if blocks else None,
            "p50_lag_s": float(np.percentile(lags, 50)),
            "p95_lag_s": float(np.percentile(lags, 95)),
            "max_queue_wait_s": max((b.queue_wait_s for b in blocks), default=0.0),
            "drafter_failures": sum(1 for b in blocks if b.result.producer_error),
        }
        if self.check and blocks and all(b.exact is not None for b in blocks):
            out["exact"] = all(b.exact for b in blocks)
        return out
