"""Does a drafter that walks the whole recording on its own seek beat drafting each long-form request at arrival?

Interleaved rounds on one long recording, the seek route, greedy with the fallback, no device profile (always
drafts): target-only; as2d drafting each request from its arrival (the pipeline's walk turned off); as2d with
``RecordingDrafter`` (each request reads the drafter's own walk). Prints medians of the wall clock, the summed
prepare and decode clocks, process CPU, accepted tokens and whether each transcript equals target-only's.
``--no-widen`` keeps the target on its shared threads for the whole decode.

    .venv/bin/python scripts/recording_walk_bench.py bench-out/long_once.wav --rounds 3
"""
from __future__ import annotations

import argparse
import resource
import statistics

import attrs

import as2d_core.decode.proposers as proposers
from as2d_core.decode.options import DecodeOptions
from as2d_core.input.audio import read_audio
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import DEFAULT_SOURCE, build_part, build_pipeline, build_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-widen", action="store_true")
    args = parser.parse_args()
    if args.no_widen:
        made = proposers.PublishedProposer.__init__

        def never_widened(self, *a, **k):
            made(self, *a, **k)
            self.widened = True
        proposers.PublishedProposer.__init__ = never_widened
    samples = read_audio(args.audio).samples
    target, source = build_part("target", "whisper-base"), build_source(DEFAULT_SOURCE)
    options = PipelineOptions(language="en", decode=DecodeOptions(profile=None))
    plain = build_pipeline(target, None, attrs.evolve(options, method="target-only"))
    walk = build_pipeline(target, source, options)
    arrival = build_pipeline(target, source, options)
    arrival._walker = None
    pipelines = {"target-only": plain, "as2d-per-request": arrival, "as2d-walk": walk}
    for pipeline in pipelines.values():
        pipeline.transcribe(samples[: 30 * 16_000])  # warm
    runs: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for name, pipeline in pipelines.items():
            usage = resource.getrusage(resource.RUSAGE_SELF)
            cpu = usage.ru_utime + usage.ru_stime
            transcript = pipeline.transcribe(samples, "run")
            usage = resource.getrusage(resource.RUSAGE_SELF)
            results = [w.result for w in transcript.windows]
            runs.setdefault(name, []).append(dict(
                wall=transcript.wall_s, cpu=usage.ru_utime + usage.ru_stime - cpu,
                prepare=sum(r.prepare_s for r in results), decode=sum(r.decode_s for r in results),
                accepted=sum(r.accepted for r in results), text=transcript.text))
    base = statistics.median(r["wall"] for r in runs["target-only"])
    print("| method | wall (s) | vs target-only | prepare (s) | decode (s) | CPU (s) | accepted | same text |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, rows in runs.items():
        m = {k: statistics.median(r[k] for r in rows) for k in ("wall", "cpu", "prepare", "decode", "accepted")}
        same = all(r["text"] == runs["target-only"][0]["text"] for r in rows)
        print(f"| {name} | {m['wall']:.2f} | {base / m['wall']:.2f}x | {m['prepare']:.2f} | {m['decode']:.2f} | "
              f"{m['cpu']:.1f} | {m['accepted']:.0f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
