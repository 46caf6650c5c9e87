"""A stop signal to a real ``as2d serve``: nothing lost, exit status 0, within the grace period.

Each request in flight is answered, or refused with 503 and Retry-After; a request that arrives
after the signal is refused the same way while the server still listens. The clips are real speech
(``tests/data``) and the models the real Whisper pair.
"""
from __future__ import annotations

import signal
import threading
import time

import httpx
from conftest import speech_row
from test_serve import Server

CLOSE_MARGIN_S = 60.0  # a stopped decode ends at its next target call; a busy two-core machine is slow


def _post_in_thread(server, data: bytes, answers: dict, key: str, **fields) -> threading.Thread:
    def post():
        try:
            answers[key] = server.post(data, **fields)
        except httpx.HTTPError as exc:  # lost: the test says so
            answers[key] = exc

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def _refused(response) -> bool:
    return isinstance(response, httpx.Response) and response.status_code == 503 \
        and int(response.headers["Retry-After"]) >= 1 and "shutting down" in response.json()["error"]["message"]


def test_sigterm_answers_the_decode_in_flight_and_refuses_the_rest():
    long = speech_row("ljspeech_en_w00")["file"].read_bytes()  # 26 s, decoded twice with check: many seconds
    short = speech_row("cmu_cards_en_w00")["file"].read_bytes()
    grace_s = 120.0
    answers: dict = {}
    with Server("--decodes", "1", "--queue-size", "4", "--grace-s", str(grace_s)) as server:
        threads = [_post_in_thread(server, long, answers, "decoding", response_format="verbose_json", check="true")]
        server.wait_for(lambda s: s["active"] == 1, "the long request is decoding")
        threads += [_post_in_thread(server, short, answers, f"waiting{i}") for i in range(2)]
        server.wait_for(lambda s: s["waiting"] == 2, "two requests wait for the slot")
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        late = server.post(short)  # the decode still runs, so the server still listens
        health = httpx.get(server.url + "/health", timeout=10)
        status = server.process.wait(grace_s + CLOSE_MARGIN_S)
        took = time.monotonic() - sent
        for t in threads:
            t.join(60)
    assert status == 0 and took < grace_s
    assert health.status_code == 503 and health.json()["status"] == "stopping"
    assert _refused(late) and _refused(answers["waiting0"]) and _refused(answers["waiting1"])
    decoded = answers["decoding"]
    assert isinstance(decoded, httpx.Response) and decoded.status_code == 200, decoded
    assert decoded.json()["as2d"]["exact"] is True  # the target's own greedy output, finished after the signal
    server.log.seek(0)
    assert "as2d serve: stopping" in server.log.read()


def test_sigint_stops_a_decode_past_the_grace_period_with_503():
    long = speech_row("ljspeech_en_w00")["file"].read_bytes()
    grace_s = 1.0
    answers: dict = {}
    with Server("--decodes", "1", "--grace-s", str(grace_s)) as server:
        thread = _post_in_thread(server, long, answers, "decoding", check="true")
        server.wait_for(lambda s: s["active"] == 1, "the long request is decoding")
        sent = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        status = server.process.wait(grace_s + CLOSE_MARGIN_S)
        took = time.monotonic() - sent
        thread.join(60)
    assert status == 0 and took < grace_s + CLOSE_MARGIN_S
    assert _refused(answers["decoding"]), answers["decoding"]
