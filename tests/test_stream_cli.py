"""``as2d stream`` prints committed text only: each context view's text once its last block is decoded (no later
block revises it), the blocks' timings on stderr, and a final transcript line; real whisper-base, bundled clip."""
from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from as2d_core.cli.main import cli
from as2d_core.input.audio import load_audio
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline

BUNDLED = Path(__file__).resolve().parents[1] / "examples" / "ljspeech_en_w00.wav"
STREAM = ["stream", str(BUNDLED), "--pace", "fast", "--method", "target-only", "--language", "en",
          "--block-s", "8", "--context-s", "16"]


def test_stream_prints_only_committed_text_and_a_transcript(whisper_target):
    text = CliRunner().invoke(cli, STREAM)
    assert text.exit_code == 0, text.output
    pipeline = build_pipeline(whisper_target, None, PipelineOptions(method="target-only", language="en"), detector=None)
    replayed = pipeline.stream(8, 16).replay(load_audio(BUNDLED), "fast")
    blocks = [{"final": b.final, "view_start_s": b.view_start_s, "end_s": b.end_s, "text": b.text} for b in replayed]
    final = [b for b in blocks if b["final"]]  # as each block was yielded: the last one too
    assert len(final) == 2 and len(blocks) == 4  # views 0-16 s and 16-26 s; blocks 0 and 2 are revised later
    *committed, summary, transcript = text.stdout.splitlines()
    spans = [re.match(r"\[target-only +([\d.]+)- +([\d.]+) s\] (.*)", line) for line in committed]
    assert all(spans) and [(float(m[1]), float(m[2]), m[3]) for m in spans] == [
        (b["view_start_s"], round(b["end_s"], 1), b["text"]) for b in final]
    revised = [b["text"] for b in blocks if not b["final"]]
    assert not any(t and t in text.stdout for t in revised if t not in " ".join(b["text"] for b in final))
    assert summary.startswith("[target-only fast] 4 blocks")
    assert transcript == "[target-only] transcript: " + " ".join(m[3] for m in spans)
    held = [line for line in text.stderr.splitlines() if "text held" in line]
    assert len(held) == 2 and len(text.stderr.splitlines()) == 4  # every block's timings, on stderr
