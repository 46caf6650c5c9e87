"""The bench on real Whisper models and real speech: ``--ray`` on a local Ray instance (2 CPUs) gives the
rows of a local run, a killed worker's window is retried on another and every window finishes once; the
``eligible`` block on an English and a German window."""
from __future__ import annotations

import json
import wave

import numpy as np
import pytest

from as2d_core.input.audio import load_audio
from as2d_core.decode.options import DecodeOptions
from as2d_bench.runner import expand_methods, read_manifest
from conftest import full_only

EXAMPLE = "examples/ljspeech_en_w00.wav"
PIECE_S = 5.0  # three short pieces of the example: distinct windows, cheap on two shared cores


@pytest.fixture(scope="module")
def ray_instance():
    try:
        import ray
    except ImportError:
        pytest.fail("Ray is not installed: pip install -e '.[test]'")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024 ** 2, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    from pathlib import Path

    folder = tmp_path_factory.mktemp("windows")
    audio = load_audio(Path(__file__).parents[1] / EXAMPLE)
    lines = []
    for i in range(3):
        piece = audio[int(i * PIECE_S * 16_000): int((i + 1) * PIECE_S * 16_000)]
        with wave.open(str(folder / f"lj{i}.wav"), "wb") as f:
            f.setnchannels(1), f.setsampwidth(2), f.setframerate(16_000)
            f.writeframes((np.clip(piece, -1, 1) * 32767).astype(np.int16).tobytes())
        lines.append(json.dumps({"id": f"lj{i}", "path": f"lj{i}.wav", "lang": "en"}))
    (folder / "m.jsonl").write_text("\n".join(lines) + "\n")
    return read_manifest(folder / "m.jsonl")


@pytest.fixture(scope="module")
def spec():
    from as2d_bench.spec import BenchSpec

    options = DecodeOptions(target_threads=1, shared_target_threads=1, drafter_threads=1)
    return BenchSpec(tuple(expand_methods(["as2d"])), "whisper-base", ("whisper-tiny.en",), options, warmup=False)


@pytest.fixture(scope="module")
def local_rows(spec, windows, tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    spec.build(out, progress=False).run(windows)
    return _rows(out)


def _rows(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _outcome(rows):
    """What must not depend on where a window ran: per (window, method) the tokens, text and exactness."""
    return {(r["window"], r["method"]): (r["tokens"], r["text"], r["exact"]) for r in rows}


@full_only  # a Ray cluster of two workers (35 s); the default run takes Ray's path in test_select
def test_ray_gives_the_local_rows(ray_instance, spec, windows, local_rows, tmp_path):
    from as2d_bench.distributed import RayBench

    summary = RayBench(spec, tmp_path, workers=2, cpus_per_worker=1, progress=False).run(windows)
    rows = _rows(tmp_path)
    assert len(rows) == len(local_rows) == 3 * 2
    assert _outcome(rows) == _outcome(local_rows)
    assert all(r["exact"] is True for r in rows)
    assert summary["windows"] == [w.id for w in windows] and summary["run"]["retried_windows"] == []
    for window in {r["window"] for r in rows}:  # each window's methods ran back to back on one worker
        assert len({r["worker"]["pid"] for r in rows if r["window"] == window}) == 1
    assert all(r["machine"]["kind"] and r["machine"]["versions"]["ray"] for r in rows)
    pinned = {r["worker"]["pid"]: tuple(r["worker"]["cores"] or ()) for r in rows}
    assert len(set(pinned.values())) == len(pinned)  # each worker on cores of its own (one each here)


@full_only  # on the Ray cluster above (the full run's); retrying a lost window is our driver's, checked here
def test_a_killed_worker_loses_no_window(ray_instance, spec, windows, local_rows, tmp_path):
    from as2d_bench.distributed import RayBench

    killed = []

    def kill_the_second(driver, actor, window):
        if len(killed) == 0 and len(driver.in_flight) == 2:  # both workers busy: kill one mid-window
            ray_instance.kill(actor, no_restart=True)
            killed.append(window.id)

    summary = RayBench(spec, tmp_path, workers=2, cpus_per_worker=1, progress=False,
                       on_submit=kill_the_second).run(windows)
    rows = _rows(tmp_path)
    assert killed and summary["run"]["retried_windows"] == killed
    assert sorted((r["window"], r["method"]) for r in rows) == sorted(_outcome(local_rows))  # each window once
    assert _outcome(rows) == _outcome(local_rows)
    retried = {r["worker"]["pid"] for r in rows if r["window"] == killed[0]}
    assert len(retried) == 1 and summary["run"]["workers"] == 2


def test_eligible_block_on_real_speech(whisper_target, whisper_source, tmp_path):
    """An English and a German window of the shared speech set: tiny.en drafts only the English one, whose row
    says so (``served``), and the ``eligible`` block holds only it; both clocks are reported for both blocks."""
    from conftest import SHARED_SPEECH
    from as2d_bench.runner import Bench

    manifest = SHARED_SPEECH / "windows.jsonl"
    if not manifest.is_file():
        pytest.skip(f"the shared speech set is not here ({manifest}); it lives beside the checkout (../shared)")
    windows = [w for w in read_manifest(manifest) if w.id in ("pocketsphinx_en_w00", "fleurs_de_w03")]
    options = DecodeOptions(target_threads=1, shared_target_threads=1, drafter_threads=1)
    summary = Bench(whisper_target, whisper_source, options, expand_methods(["as2d"]), tmp_path, progress=False,
                    warmup=False).run(windows)
    rows = {(r["window"], r["method"]): r for r in _rows(tmp_path)}
    assert rows[("pocketsphinx_en_w00", "as2d")]["served"] is True
    assert rows[("fleurs_de_w03", "as2d")]["served"] is False and rows[("fleurs_de_w03", "as2d")]["proposed"] == 0
    assert all(r["exact"] is True and r["e2e_s"] > r["decode_s"] > 0 for r in rows.values())
    assert summary["eligible"]["windows"] == ["pocketsphinx_en_w00"]
    for block in (summary["methods"], summary["eligible"]["methods"]):
        assert block["target-only"]["e2e_ratio_vs_target_only"] == pytest.approx(1.0)
        assert block["as2d"]["pooled_e2e_tps"] > 0 and block["as2d"]["e2e_ratio_vs_target_only"] > 0
    assert summary["eligible"]["methods"]["as2d"]["windows"] == 1 and summary["methods"]["as2d"]["windows"] == 2
