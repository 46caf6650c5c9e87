"""``as2d serve --slots 3``: requests decoded at once on one copy of whisper-base, their target calls batched by
the scheduler (``as2d_core.decode.scheduler``), each answer exactly what the request gets alone."""
from __future__ import annotations

import json
import os
import threading

import pytest
import soundfile

from test_serve import EXAMPLE, WAIT_S, Server, _wav, disconnect_while_decoding


@pytest.fixture(scope="module")
def slots_server():
    s = Server("--slots", "3", "--queue-size", "4")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def clips():
    """Three real clips of different lengths, cut from the bundled recording, long enough that their decodes
    overlap once their encoders (which run side by side) are done: 9 s and 6 s clips decoded so quickly that on a
    quick host three tries in a row met no call together."""
    samples, rate = soundfile.read(EXAMPLE, dtype="int16")
    assert rate == 16_000
    cuts = [(0, 26), (2, 22), (5, 21)]
    return [_wav(samples[a * rate: b * rate]) for a, b in cuts]


def test_a_client_that_disconnects_leaves_the_batch(slots_server, clips):
    """A row stopped mid-decode leaves the scheduler's group; the slot is free again."""
    disconnect_while_decoding(slots_server, clips[2])


def _three_at_once(server, clips, alone, **fields) -> list[dict]:
    """The clips posted at once (with form ``fields``), each equal to its tokens alone and, unless a beam search
    (which runs target-only), checked exact; their batch records."""
    answers: list = [None] * len(clips)
    checked = not fields.get("beam_size")

    def ask(i):
        answers[i] = server.post(clips[i], response_format="verbose_json", check=str(checked).lower(), **fields)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(clips))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    bodies = [a.json() for a in answers]
    assert all(a.status_code == 200 for a in answers), bodies
    for body, tokens in zip(bodies, alone):
        assert not checked or body["as2d"]["exact"] is True
        assert body["as2d"]["tokens"] == tokens  # what the request gets alone, through the single-window graph
    batches = [body["as2d"]["batch"] for body in bodies]
    for batch in batches:  # the rule: a request drafts only when admitted beside fewer than speculate_rows
        assert batch["drafted"] == (batch["beside"] < batch["speculate_rows"] and checked), batches
    return batches


def _shared_calls(server) -> float:
    """Target calls so far that carried more than one request."""
    return server.metric("as2d_batch_rows_count") - server.metric('as2d_batch_rows_bucket{le="1.0"}')


def _until_a_call_is_shared(server, clips, alone, **fields) -> None:
    """Three at once until a target call carried several of them (requests that overlap may still meet no call
    together: the timing is the host's); skips where they never overlapped."""
    shared, overlapped = _shared_calls(server), 0
    for _ in range(5):
        batches = _three_at_once(server, clips, alone, **fields)
        overlapped += any(batch["beside"] for batch in batches)
        if _shared_calls(server) > shared:
            return
    if not overlapped:  # each finished before the next was admitted, every time
        pytest.skip(f"the requests never overlapped on this machine (load {os.getloadavg()[0]:.1f}): "
                    "nothing to batch")
    pytest.fail(f"requests decoded side by side {overlapped} time(s) never shared a target call")


def test_three_requests_at_once_are_each_exact(slots_server, clips):
    alone = [slots_server.post(clip, method="target-only", response_format="verbose_json").json()["as2d"]["tokens"]
             for clip in clips]
    _until_a_call_is_shared(slots_server, clips, alone)
    assert slots_server.metric("as2d_rows_speculating") == 0
    assert slots_server.metric("as2d_queue_wait_seconds_count") >= len(clips) + len(alone)


def test_three_beam_searches_at_once_each_find_their_search_alone(slots_server, clips):
    """faster-whisper's ``beam_size=5`` from three clients at once: their searches step together in the
    scheduler's beam wave, and each finds what it finds alone (on the same wave's graph)."""
    alone = [slots_server.post(clip, beam_size=5, response_format="verbose_json").json()["as2d"]["tokens"]
             for clip in clips]
    _until_a_call_is_shared(slots_server, clips, alone, beam_size=5)


def test_a_profile_without_batch_costs_is_refused_in_one_line(tmp_path):
    from click.testing import CliRunner

    from as2d_serve.plugin import serve

    profile = tmp_path / "old.json"
    profile.write_text(json.dumps({"format": "as2d-profile/1", "verify_s": {}}))
    result = CliRunner().invoke(serve, ["--slots", "2", "--profile", str(profile)])
    assert result.exit_code == 2
    assert "has no batch costs (batch_s)" in result.output and len(result.output.strip().splitlines()) == 1
