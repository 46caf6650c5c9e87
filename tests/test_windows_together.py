"""Windows decoded side by side (``DecodeOptions.batch_windows``): one call verifies a wave's windows, or makes a
step of all their beam searches (``decode.together.BeamsTogether``), and every window's tokens are still the ones
it gets alone.

The rendezvous is checked with real threads on a small deterministic model (any drafts, any budget, a
window that fails); the Whisper group on the real models and real speech kept in the repository:
its rows against sessions of their own under arbitrary proposals, rows leaving in any order, and whole
files by every method against one window at a time.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from as2d_core.contracts import Request
from as2d_core.decode.beam import BeamOptions, run_beam_request
from as2d_core.decode.request import run_request
from as2d_core.decode.together import BeamsTogether, WindowsTogether
from as2d_core.input.audio import load_audio
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.decode.options import DecodeOptions
from conftest import full_only
from drafting import options_that_draft
from tiny_lm import ScriptedSource, TinyBeamRows, TinyLM

REPO = Path(__file__).resolve().parents[1]
SR = 16000


class TinyGroup:
    """A window group on the tiny model: each row verified by its own session, the calls and their rows counted.
    ``call_s``: each call takes at least that long, as a real target's does (the scheduler waits that long for the
    other rows to ask)."""

    def __init__(self, model: TinyLM, size: int, fail_on_call: int | None = None, call_s: float = 0.0):
        self.model, self.size, self.fail_on_call, self.call_s = model, size, fail_on_call, call_s
        self.calls: list[int] = []
        self._lock = threading.Lock()

    def prepare(self, request, threads):
        return self.model.prepare(request, threads)

    def verify_rows(self, rows):
        with self._lock:
            self.calls.append(len(rows))
            if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
                raise RuntimeError("the group's call failed")
        time.sleep(self.call_s)
        return [session.verify(root, candidates) for session, root, candidates in rows]


def _requests(count: int) -> list[Request]:
    rng = np.random.default_rng(count)
    return [Request(f"w{i}", rng.normal(size=1600).astype(np.float32), language="en") for i in range(count)]


def _in_threads(requests, decode) -> list:
    """``decode(request)`` of every request at once, each in a thread of its own, as the pipeline runs a wave:
    each result, or the exception it raised."""
    results: list = [None] * len(requests)

    def one(i):
        try:
            results[i] = decode(requests[i])
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "a window of the wave never ended"
    return results


def _wave(target, requests, source=None, method="target-only", budget=7):
    """``requests`` decoded at once as the pipeline runs a wave."""
    return _in_threads(requests, lambda r: run_request(r, target, source, method, DecodeOptions(budget=budget)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows=st.integers(2, 4), budget=st.integers(1, 9), seed=st.integers(0, 10_000),
       draft=st.lists(st.integers(0, 31), max_size=40))
@example(windows=2, budget=1, seed=63, draft=[0, 30])  # drafts accepted: fewer calls than tokens
def test_a_wave_verified_together_equals_each_window_alone(windows, budget, seed, draft):
    """Any drafts, any budget: each window of a wave commits its target-only tokens, and the calls carried
    several windows at once."""
    model = TinyLM(seed=seed)
    requests = _requests(windows)
    alone = [run_request(r, model, None, "target-only").tokens for r in requests]
    group = TinyGroup(model, windows)
    source = ScriptedSource(draft)
    together = _wave(WindowsTogether(model, group, windows), requests, source, "as2d", budget)
    assert [r.tokens for r in together] == alone
    assert max(group.calls) == sum(1 for tokens in alone if tokens)  # once all had joined, one call served them all
    # a response's first token needs no call, and a call commits at most budget + 1 tokens a row (drafts accepted)
    assert sum(group.calls) >= -(-(max(len(t) for t in alone) - 1) // (budget + 1))


def test_a_failed_call_fails_its_windows_and_a_failed_window_holds_no_one_up():
    model = TinyLM(seed=3)
    requests = _requests(3)
    alone = [run_request(r, model, None, "target-only").tokens for r in requests]
    assert all(alone)
    failing = _wave(WindowsTogether(model, TinyGroup(model, 3, fail_on_call=1), 3), requests)
    assert all(isinstance(r, RuntimeError) for r in failing)  # all three were in the call that failed

    class OneBadPrepare(TinyGroup):
        def prepare(self, request, threads):
            if request.request_id == "w1":
                raise ValueError("bad audio")
            return super().prepare(request, threads)

    results = _wave(WindowsTogether(model, OneBadPrepare(model, 3), 3), requests)
    assert isinstance(results[1], ValueError)
    assert [results[0].tokens, results[2].tokens] == [alone[0], alone[2]]


class TinyBeamWave:
    """A beam wave on the tiny model (``capabilities.BeamWave``): each window's rows advance on their own, the
    steps of the wave counted by the windows they carry."""

    def __init__(self, size: int):
        self.size = size
        self.steps: list[int] = []

    def rows(self, session, width, gather):
        return _TinyWaveRows(TinyBeamRows(session, width), gather)

    def step(self, asks):
        self.steps.append(len(asks))
        return [rows.inner.advance(spec) for _, (rows, spec) in asks]


class _TinyWaveRows:
    def __init__(self, inner: TinyBeamRows, gather):
        self.inner, self._gather, self.width = inner, gather, inner.width

    def first_logits(self):
        return self.inner.first_logits()

    def advance(self, rows):
        return self._gather((self, rows))

    def close(self):
        self.inner.close()


def _beam_wave(target, requests, beam_size, as_verified_id=None):
    """``requests`` searched at once as the pipeline runs a wave of beams; the one named ``as_verified_id`` asks for
    sampled rows instead (the window's own, outside the wave) and gives its first row's best token."""

    def search(request):
        if request.request_id != as_verified_id:
            return run_beam_request(request, target, BeamOptions(beam_size))
        session = target.prepare(request, 1)
        rows = session.beam_rows(beam_size, True)
        best = rows.first_logits().argmax()
        rows.close()
        session.close()
        return best

    return _in_threads(requests, search)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windows=st.integers(2, 4), beam_size=st.integers(2, 4), seed=st.integers(0, 10_000))
def test_a_wave_of_beam_searches_equals_each_search_alone(windows, beam_size, seed):
    """Each window's beam search steps at the wave's rendezvous and still finds its own best hypothesis; a step
    carried every window still searching."""
    model = TinyLM(seed=seed)
    requests = _requests(windows)
    alone = [run_beam_request(r, model, BeamOptions(beam_size)).tokens for r in requests]
    wave = TinyBeamWave(windows)
    together = _beam_wave(BeamsTogether(model, wave, windows), requests, beam_size)
    assert [r.tokens for r in together] == alone
    assert wave.steps and wave.steps[0] == windows  # the first step waited for every window, then served them all


def test_a_window_that_leaves_a_beam_wave_or_fails_holds_no_one_up():
    model = TinyLM(seed=3)
    requests = _requests(3)
    alone = [run_beam_request(r, model, BeamOptions(3)).tokens for r in requests]

    class OneBadPrepare(TinyLM):
        def prepare(self, request, threads):
            if request.request_id == "w1":
                raise ValueError("bad audio")
            return super().prepare(request, threads)

    results = _beam_wave(BeamsTogether(OneBadPrepare(seed=3), TinyBeamWave(3), 3), requests, 3)
    assert isinstance(results[1], ValueError)
    assert [results[0].tokens, results[2].tokens] == [alone[0], alone[2]]
    results = _beam_wave(BeamsTogether(model, TinyBeamWave(3), 3), requests, 3, as_verified_id="w0")
    assert [results[1].tokens, results[2].tokens] == [alone[1], alone[2]]


# --------------------------------------------------------------------------- Whisper, real speech


def _speech(seconds: float) -> np.ndarray:
    """Real speech kept in the repository (tests/data/clips and the bundled clip), one second apart."""
    clips = sorted((REPO / "tests" / "data" / "clips").glob("*.wav")) + [REPO / "examples" / "ljspeech_en_w00.wav"]
    gap = np.zeros(SR, np.float32)
    pieces, total = [], 0
    while total < seconds * SR:
        for path in clips:
            pieces += [load_audio(path), gap]
            total += pieces[-2].size + gap.size
    return np.concatenate(pieces)[: int(seconds * SR)]


@pytest.fixture(scope="module")
def file_audio():
    return _speech(100.0)


@pytest.fixture(scope="module")
def group_rows(whisper_target):
    clips = sorted((REPO / "tests" / "data" / "clips").glob("*.wav"))[:3]
    return [Request(f"g{i}", load_audio(p), language="en") for i, p in enumerate(clips)]


def test_whisper_group_rows_equal_sessions_of_their_own(whisper_target, group_rows):
    """Arbitrary candidates of any width per row, rejections cut back, rows leaving in any order (the last
    row then alone on the single-window graph): each row's predictions are its own session's."""
    rng = np.random.default_rng(7)
    group = whisper_target.window_group(3, 2)
    assert group is not None
    rows = [group.prepare(r, 2) for r in group_rows]
    own = [whisper_target.prepare(r, 2) for r in group_rows]
    roots = [s.first_token() for s in own]
    assert roots == [s.first_token() for s in rows]
    active = [0, 1, 2]
    for step in range(24):
        if step in (8, 16):  # the middle row leaves first, then the first: the others move into their places
            gone = active.pop(1 if step == 8 else 0)
            rows[gone].close()
            own[gone].close()
        asked = [(i, [int(t) for t in rng.integers(0, 50_000, rng.integers(0, 6))]) for i in active]
        got = group.verify_rows([(rows[i], roots[i], c) for i, c in asked]) if len(active) > 1 else [
            rows[active[0]].verify(roots[active[0]], asked[0][1])]
        for (i, candidates), predictions in zip(asked, got):
            assert predictions == own[i].verify(roots[i], candidates), (step, i)
            keep = int(rng.integers(0, len(candidates) + 1))
            for session in (rows[i], own[i]):
                session.truncate(session.cache_length - len(candidates) + keep)
            roots[i] = predictions[keep]
    rows[active[0]].close()
    own[active[0]].close()


@pytest.mark.parametrize("method, target_name, fields", [  # the default run: as2d at fp32; the rest in the full run
    pytest.param("target-only", "whisper-base", {}, marks=full_only),
    ("as2d", "whisper-base", {}),
    pytest.param("as2d", "whisper-base", {"timestamps": "segment"}, marks=full_only),
    pytest.param("as2d", "whisper-base-int8", {}, marks=full_only),
])
def test_a_file_decoded_in_waves_equals_one_window_at_a_time(method, target_name, fields, file_audio, whisper_target,
                                                             whisper_int8_target, whisper_ct2_source, monkeypatch):
    from as2d_whisper.window_group import WhisperWindowGroup

    target = whisper_int8_target if target_name == "whisper-base-int8" else whisper_target
    source = whisper_ct2_source if method == "as2d" else None

    def pipeline(batch_windows: int) -> Pipeline:
        decode = options_that_draft(route="windows", batch_windows=batch_windows, **fields)
        return build_pipeline(target, source, PipelineOptions(method=method, language="en", decode=decode))

    alone = pipeline(1).transcribe(file_audio, request_id="alone")
    assert len(alone.windows) >= 4
    rows_per_call: list[int] = []
    call = WhisperWindowGroup._call
    monkeypatch.setattr(WhisperWindowGroup, "_call",
                        lambda self, rows, width: rows_per_call.append(len(rows)) or call(self, rows, width))
    together = pipeline(3).transcribe(file_audio, request_id="together")
    assert [w.tokens for w in together.windows] == [w.tokens for w in alone.windows]
    assert [w.text for w in together.windows] == [w.text for w in alone.windows]
    assert max(rows_per_call) == 3  # the waves' windows really shared calls
    if method == "as2d":
        assert all(w.result.source for w in together.windows)


def test_a_target_without_a_windows_graph_decodes_one_window_at_a_time(whisper_source, file_audio):
    """The drafter's folder has no windows graph (nor has an MNN target): the file is decoded as before."""
    from as2d_whisper.target import WhisperTarget

    tiny = WhisperTarget(whisper_source.model.dir)
    assert tiny.window_group(2, 1) is None
    decode = DecodeOptions(route="windows", batch_windows=4, target_threads=1)
    transcript = build_pipeline(tiny, None, PipelineOptions(method="target-only", language="en", decode=decode)).transcribe(
        file_audio[: 40 * SR], request_id="tiny")
    assert len(transcript.windows) >= 2 and transcript.text.strip()


def test_whisper_beam_wave_rows_equal_rows_of_their_own(whisper_target, group_rows):
    """Three windows' beam rows stepping in one call of the windows graph, under arbitrary forks (any parent, any
    prefix kept, one or two tokens appended), the windows leaving after 4, 8 and 12 steps: every row's logits are
    those of the same window's rows alone on that graph (``beams.WindowsRows``), the same masks, the scores equal
    but for the rounding of reductions whose length follows the call's widest row and longest cache (as in the
    greedy windows group: the file test below and the batched pipeline's tests compare the tokens)."""
    from as2d_whisper.beams import WindowsRows

    width = 4
    together = BeamsTogether(whisper_target, whisper_target.beam_wave(3, width, 2), 3)
    failures: list = []

    def one(i: int, steps: int) -> None:
        rng = np.random.default_rng(i)
        session = together.prepare(group_rows[i], 2)
        own_session = whisper_target.prepare(group_rows[i], 2)
        rows, own = session.beam_rows(width), WindowsRows(own_session, width)
        held = [0] * width
        try:
            for step in range(steps):
                spec = []
                for _ in range(width):
                    parent = int(rng.integers(0, width))
                    spec.append((parent, int(rng.integers(0, held[parent] + 1)),
                                 [int(t) for t in rng.integers(0, 50_000, rng.integers(1, 3))]))
                held = [kept + len(tokens) for _, kept, tokens in spec]
                got, expected = rows.advance(spec), own.advance(spec)
                for a, b in zip(got, expected):  # the same masks, the same scores to the last bits' rounding
                    assert np.array_equal(np.isfinite(a), np.isfinite(b)), (i, step)
                    assert np.allclose(a[np.isfinite(a)], b[np.isfinite(b)], rtol=0, atol=1e-4), (i, step)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            rows.close()
            session.close()
            own.close()
            own_session.close()

    threads = [threading.Thread(target=one, args=(i, steps)) for i, steps in enumerate((8, 4, 12))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a window of the wave never ended"
    assert not failures, failures


def _beams_transcribed(target, batch_windows: int, audio: np.ndarray):
    """``audio`` by the windows route's beam search (5 beams) target-only, in waves of ``batch_windows``."""
    decode = DecodeOptions(route="windows", beam_size=5, temperature=0, batch_windows=batch_windows, profile=None)
    return build_pipeline(target, None, PipelineOptions(method="target-only", language="en", decode=decode)
                          ).transcribe(audio, request_id=f"beams{batch_windows}")


def test_a_file_searched_by_beams_in_waves_equals_one_window_at_a_time(whisper_target, file_audio, monkeypatch):
    """The windows route's beams step side by side (as faster-whisper's batched pipeline searches its batch): the
    same tokens in waves of 3 as one window at a time, and as each window's search on the beams graph."""
    from as2d_whisper.beams import WhisperBeamWave
    from as2d_whisper.target import WhisperTarget

    windows_per_step: list[int] = []
    step = WhisperBeamWave.step
    monkeypatch.setattr(WhisperBeamWave, "step",
                        lambda self, asks: windows_per_step.append(len(asks)) or step(self, asks))
    waves = _beams_transcribed(whisper_target, 3, file_audio)
    assert waves.route == {"route": "windows", "wave_size": 3, "drafts": False, "beams": True,
                           "why": "batch_windows 3; beam search side by side, target-only"}
    assert max(windows_per_step) == 3 and len(waves.windows) >= 4
    monkeypatch.setattr(WhisperTarget, "beam_wave", lambda self, size, width, threads: None)  # the beams graph alone
    alone = _beams_transcribed(whisper_target, 3, file_audio)
    assert alone.route == {"route": "windows", "wave_size": 1, "drafts": False, "why": "batch_windows 3; one window "
                           "at a time: beams decode their hypotheses side by side instead"}
    assert [w.tokens for w in waves.windows] == [w.tokens for w in alone.windows]


def test_an_int8_file_searched_by_beams_in_waves_equals_its_beams_graph_alone(whisper_int8_target, file_audio,
                                                                              monkeypatch):
    """The int8 target's waves step on its own windows graph for beams, int8 layers as its beams graph's: the same
    tokens in waves of 3 as on the beams graph alone, where an int8 folder made before that graph searches one
    window at a time."""
    int8_waves = _beams_transcribed(whisper_int8_target, 3, file_audio)
    assert int8_waves.route["wave_size"] == 3 and int8_waves.route["beams"]
    monkeypatch.setattr("as2d_whisper.graph_io.BEAM_WAVE_FILE", "absent.onnx")  # a folder made before it
    assert whisper_int8_target.beam_wave(3, 5, 2) is None
    int8_alone = _beams_transcribed(whisper_int8_target, 3, file_audio)  # its beams graph, one window at a time
    assert int8_alone.route["wave_size"] == 1 and "beams" not in int8_alone.route
    assert [w.tokens for w in int8_waves.windows] == [w.tokens for w in int8_alone.windows]


@full_only  # a wave of one window on the same graph (the default run compares waves of 3 with the beams graph alone)
def test_an_int8_wave_of_one_searches_as_a_wave_of_three(whisper_int8_target, file_audio):
    int8_one = _beams_transcribed(whisper_int8_target, 1, file_audio)
    assert int8_one.route["wave_size"] == 1 and int8_one.route["beams"]  # a wave of one: on the same graph
    int8_waves = _beams_transcribed(whisper_int8_target, 3, file_audio)
    assert [w.tokens for w in int8_one.windows] == [w.tokens for w in int8_waves.windows]
