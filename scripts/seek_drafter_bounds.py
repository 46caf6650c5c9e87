"""How much could drafting ahead save on the seek route? Two upper bounds beside target-only and as2d.

On the seek route each request starts where the target's last one ended, so the drafter can only start on
it at its arrival, beside the target's audio encoding. Two bounds on what a drafter that worked ahead could
give, on the same requests (the seek loop makes the same requests in every method: its decisions are taken on
exact tokens):

- ``ahead``: the next request's drafts made ahead, from the current request's first commit (the target has
  encoded by then), as if the next seek were known: the requests of a first as2d run, in order
  (``LookaheadSource.queue_next``). A real drafter would have to guess that seek, so it can only do worse.
- ``free``: every request's draft pieces replayed from that first run at once: a drafter that costs nothing.

Beside them ``as2d-prepared``: the drafter encodes its audio after the target's encoding, not beside it.

Prints, per method, the wall, the summed prepare and decode seconds and the process's CPU seconds (medians of
the rounds), and whether every request's tokens equal target-only's; then what the drafter costs alone on the
same requests (no target beside it): its wall for all of them on its threads, and per drafted token.

    .venv/bin/python scripts/seek_drafter_bounds.py bench-out/long_once.wav --target whisper-base-int8 --rounds 2
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import attrs

from as2d_core.contracts import DraftJob, DraftPiece, Request, Source
from as2d_core.decode.lookahead import LookaheadSource
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.wrappers import SourceWrapper
from as2d_core.input.audio import read_audio
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.input.sequential import long_form_steps
from as2d_core.setup.build import DEFAULT_SOURCE, build_part, build_pipeline, build_source

WARM_S = 30


def _key(request: Request) -> tuple:
    return request.request_id, request.temperature


class _Recorded:
    """A draft job whose pieces were all made before: handed over at once."""

    def __init__(self, pieces: list[DraftPiece], ended_with_eos: bool) -> None:
        self._pieces, self.ended_with_eos = pieces, ended_with_eos

    def pieces(self):
        yield from self._pieces

    def close(self) -> None:
        pass


class _Recording:
    """A draft job passing its pieces on and keeping them, once it has drafted them all, under ``key``."""

    def __init__(self, job: DraftJob, drafts: dict, key: tuple) -> None:
        self._job, self._drafts, self._key, self.ended_with_eos = job, drafts, key, False

    def pieces(self):
        made = []
        for piece in self._job.pieces():
            made.append(piece)
            yield piece
        self.ended_with_eos = bool(self._job.ended_with_eos)
        self._drafts[self._key] = (made, self.ended_with_eos)

    def close(self) -> None:
        self._job.close()


class RecordingSource(SourceWrapper):
    """Drafts as the source does and records the requests and their pieces the first time; replays them if asked."""

    def __init__(self, source: Source) -> None:
        super().__init__(source)
        self.requests: list[Request] = []
        self.drafts: dict[tuple, tuple[list[DraftPiece], bool]] = {}
        self.replay = False

    def prepare(self, request: Request, language: str, threads: int) -> DraftJob:
        key = _key(request)
        if self.replay:
            return _Recorded(*self.drafts[key])
        job = self.inner.prepare(request, language, threads)
        if key in self.drafts:
            return job
        self.requests.append(request)
        return _Recording(job, self.drafts, key)


def transcribe(pipeline, samples, request_id: str, decode=None) -> dict:
    """One long-form transcription's clocks and tokens (the pipeline's mode, seek route)."""
    mode = pipeline.options.decode
    list(long_form_steps(pipeline, samples[: WARM_S * 16_000], "warm", mode))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    steps = list(long_form_steps(pipeline, samples, request_id, mode, decode))
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    results = [a.result for s in steps for a in s.attempts]
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime - cpu,
            "prepare_s": sum(r.prepare_s for r in results), "decode_s": sum(r.decode_s for r in results),
            "accepted": sum(r.accepted for r in results), "tokens": [r.tokens for r in results]}


def drafting_ahead(pipeline, plan: list[Request], ahead: LookaheadSource):
    """A decode that queues the planned next request at the current one's first commit."""
    following = {_key(a): b for a, b in zip(plan, plan[1:])}
    threads = pipeline.options.decode.drafter_threads

    def decode(request: Request):
        upcoming = following.get(_key(request))
        queued = []

        def on_commit(session, tokens) -> None:
            if upcoming is not None and not queued:
                queued.append(upcoming)
                ahead.queue_next(upcoming, threads)

        return pipeline.decode(request, None, on_commit)

    return decode


def drafter_alone(source: Source, plan: list[Request], language: str, threads: int) -> tuple[float, int]:
    """The drafter's wall for every planned request, one after another with nothing beside it, and its tokens."""
    start, tokens = time.perf_counter(), 0
    for request in plan:
        job = source.prepare(request, language, threads)
        tokens += sum(len(piece.tokens) for piece in job.pieces())
        job.close()
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", type=Path)
    parser.add_argument("--target", default="whisper-base")
    parser.add_argument("--source", default=DEFAULT_SOURCE)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--temperature", default=",".join(map(str, DecodeOptions().temperature)))
    args = parser.parse_args()
    samples = read_audio(args.audio).samples
    target, recording = build_part("target", args.target), RecordingSource(build_source(args.source))
    options = PipelineOptions(language="en", decode=DecodeOptions(temperature=args.temperature,
                                                                   profile=None))  # always drafts: no profile
    plain = build_pipeline(target, None, attrs.evolve(options, method="target-only"))
    drafting = build_pipeline(target, recording, options)
    prepared = build_pipeline(target, recording, attrs.evolve(options, method="as2d-prepared"))
    ahead = LookaheadSource(recording.inner)
    with_ahead = build_pipeline(target, ahead, options)
    transcribe(drafting, samples, "run")  # the requests and drafts the bounds replay
    plan = [r for r in recording.requests if r.request_id.startswith("run-")]
    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for name in ("target-only", "as2d", "as2d-prepared", "ahead", "free"):
            recording.replay = name == "free"
            pipeline = {"target-only": plain, "as2d-prepared": prepared, "ahead": with_ahead}.get(name, drafting)
            decode = drafting_ahead(with_ahead, plan, ahead) if name == "ahead" else None
            runs.setdefault(name, []).append(transcribe(pipeline, samples, "run", decode))
            ahead.cancel()
    reference = runs["target-only"][0]["tokens"]
    base = statistics.median(r["wall_s"] for r in runs["target-only"])
    print(f"\n{args.audio.name}, {args.target}, drafter {args.source}, {len(plan)} requests, "
          f"{args.rounds} rounds (medians)\n")
    print("| method | wall (s) | vs target-only | prepare (s) | decode (s) | CPU (s) | accepted | exact |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in runs.items():
        median = {k: statistics.median(r[k] for r in rows) for k in ("wall_s", "prepare_s", "decode_s", "cpu_s")}
        exact = all(r["tokens"] == reference for r in rows)
        print(f"| {name} | {median['wall_s']:.2f} | {base / median['wall_s']:.2f}x | {median['prepare_s']:.2f} | "
              f"{median['decode_s']:.2f} | {median['cpu_s']:.1f} | {rows[0]['accepted']} | {'yes' if exact else 'NO'} |")
    threads = options.decode.drafter_threads
    alone = [drafter_alone(recording.inner, plan, options.language, threads) for _ in range(args.rounds)]
    wall, tokens = statistics.median(w for w, _ in alone), alone[0][1]
    print(f"\nThe drafter alone on the same {len(plan)} requests ({threads} thread(s), nothing beside it): {wall:.2f} s, "
          f"{tokens} tokens drafted, {1000 * wall / max(tokens, 1):.2f} ms a token (encoding included)")


if __name__ == "__main__":
    main()
