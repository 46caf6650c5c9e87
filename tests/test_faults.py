"""Injected drafter faults never change or lose the target's answer (engine level, real threads).

The same faults are injected into the real Whisper drafter behind a real
server in ``test_serve``; here they run on the small deterministic model.
"""
from __future__ import annotations

import threading

import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.faults import FAULTS, FaultySource
from conftest import full_only
from tiny_lm import ScriptedSource, SlowTarget, TinyLM

MODEL = TinyLM()
# 10 ms a call: the target is still decoding when a fault hits mid-request, however busy the machine
SLOW = SlowTarget(delay=0.01, model=MODEL)
OPTIONS = DecodeOptions(budget=4, publication_size=1, drain_timeout_s=0.2)


@pytest.mark.parametrize("kind", FAULTS)
def test_every_fault_leaves_the_output_exact(tiny_request, kind):
    request = tiny_request(4)
    reference = run_request(request, MODEL, None, "target-only").tokens
    source = FaultySource(ScriptedSource(reference), kind, publish_as=MODEL.vocabulary, stall_s=0.5)
    result = run_request(request, SLOW, source, "as2d", OPTIONS)
    assert result.tokens == reference
    if kind in ("raise", "garbage-out"):
        assert result.producer_error


def test_ids_outside_the_target_vocabulary_end_the_drafts_not_the_request(tiny_request):
    request = tiny_request(4)
    reference = run_request(request, MODEL, None, "target-only").tokens
    result = run_request(request, SLOW, ScriptedSource(reference[:3] + [MODEL.vocab + 5] + reference[4:]), "as2d",
                         OPTIONS)
    assert result.tokens == reference
    assert f"drafter published id {MODEL.vocab + 5}, outside the target vocabulary" in result.producer_error


class _FailingTarget:
    """The tiny model whose third call fails, as a cancelled request's target does."""

    name, vocabulary, device_in_use = MODEL.name, MODEL.vocabulary, MODEL.device_in_use

    def prepare(self, request, threads):
        session = MODEL.prepare(request, threads)
        calls = iter(range(1000))
        verify = session.verify

        def failing_verify(root, candidates):
            if next(calls) == 2:
                raise RuntimeError("request cancelled")
            return verify(root, candidates)

        session.verify = failing_verify
        return session


def test_a_failing_target_stops_its_producer(tiny_request):
    request = tiny_request(4)
    reference = run_request(request, MODEL, None, "target-only").tokens
    slow = ScriptedSource(reference * 20, delays=[0.05] * len(reference) * 20)  # would draft for 20+ s
    before = {t for t in threading.enumerate() if t.name.startswith("as2d-producer")}
    with pytest.raises(RuntimeError, match="request cancelled"):
        run_request(request, _FailingTarget(), slow, "as2d", OPTIONS)
    producers = [t for t in threading.enumerate() if t.name.startswith("as2d-producer") and t not in before]
    for thread in producers:
        thread.join(5)  # stops after its current piece (50 ms), not after the whole draft
    assert not any(thread.is_alive() for thread in producers)


def test_unknown_fault_is_refused():
    with pytest.raises(ValueError, match="unknown drafter fault 'melt'"):
        FaultySource(ScriptedSource([1]), "melt")


@full_only  # every fault on real models is the default run's in test_serve; this one goes through `as2d bench`
def test_bench_with_a_fault_stays_exact(tmp_path):
    """``as2d bench --fault raise`` on a real clip with the real Whisper models: every window exact."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import soundfile

    root = Path(__file__).resolve().parents[1]
    samples, rate = soundfile.read(root / "examples" / "ljspeech_en_w00.wav", dtype="int16")
    clip = tmp_path / "clip.wav"
    # 12 s of speech and the drafter at the target's priority: the fault (after three real pieces) must hit
    # before the target has finished, however busy the machine
    soundfile.write(clip, samples[: 12 * rate], rate, subtype="PCM_16")
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(json.dumps({"id": "clip", "path": str(clip), "lang": "en", "text": ""}) + "\n")
    done = subprocess.run([sys.executable, "-m", "as2d_core.cli.main", "bench", str(manifest), "--methods",
                           "target-only,as2d", "--fault", "raise", "--drafter-nice", "0", "--out", str(tmp_path / "out"),
                           "--no-warmup"],
                          capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    as2d = [r for r in rows if r["method"] == "as2d"]
    assert as2d and all(r["exact"] for r in rows)
    assert all("injected drafter fault: raise" in r["producer_error"] for r in as2d)


def test_a_fault_landing_target_keeps_the_targets_optional_parts(whisper_target):
    """Word timestamps and language probabilities still reach the real target behind the fault harness."""
    from as2d_core.capabilities import LanguageDetector, WordAligner
    from as2d_core.decode.faults import FaultLandingTarget

    assert isinstance(whisper_target, WordAligner) and isinstance(whisper_target, LanguageDetector)
    landing = FaultLandingTarget(whisper_target, FaultySource(ScriptedSource([1]), "raise"))
    assert isinstance(landing, WordAligner) and isinstance(landing, LanguageDetector)
    assert landing.features == whisper_target.features
