"""``as2d serve`` as a real server process on 127.0.0.1, called by real clients.

Each server is ``as2d serve`` in a subprocess on a free port with the real
Whisper models; the clips are cut from the bundled public-domain LJ Speech
recording. Every answer is compared with the target's own greedy output.
"""
from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
import srt
import webvtt

from as2d_core.setup.build import DEFAULT_SOURCE
from as2d_core.decode.faults import FAULTS
from as2d_serve.launch import ServerFailed, ServerProcess

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ljspeech_en_w00.wav"
START_TIMEOUT_S = 300  # model loading on a busy two-core machine
WAIT_S = 180  # longest any test waits for the server to reach a state


def _wav(samples: np.ndarray, subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, 16_000, format="WAV", subtype=subtype)
    return out.getvalue()


@pytest.fixture(scope="module")
def speech():
    samples, rate = soundfile.read(EXAMPLE, dtype="int16")
    assert rate == 16_000
    return samples


@pytest.fixture(scope="module")
def clips(speech):
    """Two short real clips (as WAV bytes), a long one just under the 30 s window, and a file of four windows
    (108 s: decoded and checked, it outlasts four 0.5 s deadlines however fast the machine)."""
    long = np.concatenate([speech, speech[: int(3.9 * 16_000)]])
    file = np.concatenate([speech, np.zeros(16_000, speech.dtype)] * 4)
    return {"a": _wav(speech[: 4 * 16_000]), "b": _wav(speech[4 * 16_000: 8 * 16_000]), "long": _wav(long),
            "file": _wav(file)}


class Server(ServerProcess):
    """A server whose log is kept for a failure message, and whose waits fail the test."""

    def __init__(self, *args: str, env: dict | None = None):
        self.log = tempfile.TemporaryFile(mode="w+")
        try:
            super().__init__(*args, env=env, cwd=ROOT, start_timeout_s=START_TIMEOUT_S, stderr=self.log,
                             request_timeout_s=WAIT_S)
        except ServerFailed as exc:
            self.log.seek(0)
            pytest.fail(f"{exc}: {self.log.read()[-2000:]}")

    def wait_for(self, condition, what: str) -> dict:
        state = super().wait_for(condition, WAIT_S)
        if state is None:
            pytest.fail(f"the server never reached: {what}")
        return state


@pytest.fixture(scope="module")
def server():
    s = Server("--queue-size", "16", "--max-upload-mb", "1.5")
    yield s
    s.stop()


def _streamed(server, data: bytes, **fields) -> dict:
    """The last event (``transcript.text.done``) of a streamed request: its text and as2d's account."""
    response = server.post(data, stream="true", **fields)
    assert response.status_code == 200, response.text
    return json.loads(response.text.strip().split("\n\n")[-1].removeprefix("data: "))


@pytest.fixture(scope="module")
def target_only(server, clips):
    """The target's own greedy tokens and text for each short clip, from the same server: plain (json and
    text answers), and in timestamp mode (``segmented``: srt, vtt and verbose_json answers)."""
    out = {}
    for name in ("a", "b"):
        done = _streamed(server, clips[name], method="target-only")
        out[name] = (done["as2d"]["tokens"], done["text"])
        body = server.post(clips[name], method="target-only", response_format="verbose_json").json()
        out[f"{name}-segmented"] = (body["as2d"]["tokens"], body["text"])
    return out


def test_openai_client_equals_as2d_run(server, clips, tmp_path):
    openai = pytest.importorskip("openai")
    path = tmp_path / "clip_a.wav"
    path.write_bytes(clips["a"])
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with path.open("rb") as f:
        served = client.audio.transcriptions.create(model="whisper-1", file=f)
    run = subprocess.run([sys.executable, "-m", "as2d_core.cli.main", "run", str(path), "--json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=WAIT_S)
    assert run.returncode == 0, run.stderr
    assert served.text == json.loads(run.stdout)["text"]
    assert served.text.strip()


def test_every_response_format(server, clips, target_only, speech):
    """json and text are plain; srt, vtt and verbose_json are in Whisper's segments by default, as OpenAI's are;
    verbose_json names the language as OpenAI does; /v1/models lists what a request may name as its model (drafters
    are no model to ask for), each name answered."""
    tokens, text = target_only["a-segmented"]
    verbose = server.post(clips["a"], response_format="verbose_json", check="true").json()
    assert verbose["text"] == text and verbose["as2d"]["tokens"] == tokens
    assert verbose["as2d"]["exact"] is True and "words" not in verbose  # no granularity, the server's default: none
    assert verbose["as2d"]["method"] == "as2d" and verbose["as2d"]["source"] == DEFAULT_SOURCE
    assert verbose["duration"] == pytest.approx(4.0) and verbose["language"] == "english"
    assert {"prepare_s", "decode_s", "queued_s"} <= set(verbose["as2d"]["timings"])
    timestamp_begin = 50364  # whisper-base's <|0.00|>: each segment opens with its timestamp
    assert verbose["segments"] and all(s["tokens"][0] >= timestamp_begin for s in verbose["segments"])
    assert server.post(clips["a"]).json() == {"text": target_only["a"][1]}
    for name in ("whisper-base", "base", "Systran/faster-whisper-base"):  # faster-whisper's servers' names too
        assert server.post(clips["a"], model=name).json() == {"text": target_only["a"][1]}
    plain = server.post(clips["a"], response_format="text")
    assert plain.text == target_only["a"][1] and plain.headers["content-type"].startswith("text/plain")
    cues = list(srt.parse(server.post(clips["a"], response_format="srt").text))
    assert [(c.start.total_seconds(), c.end.total_seconds()) for c in cues] == [
        (round(s["start"], 3), round(s["end"], 3)) for s in verbose["segments"]]  # short segments: a cue each
    assert " ".join(c.content.replace("\n", " ") for c in cues) == " ".join(text.split())
    vtt = webvtt.from_string(server.post(clips["a"], response_format="vtt").text)
    assert [c.text for c in vtt] == [c.content for c in cues]
    long = _wav(speech)  # the whole clip: segments too long for one cue are split, every cue fits
    long_cues = list(srt.parse(server.post(long, response_format="srt").text))
    lines = [line for c in long_cues for line in c.content.split("\n")]
    assert len(long_cues) > 5 and max(len(c.content.split("\n")) for c in long_cues) <= 2
    assert max(map(len, lines)) <= 42
    listed = httpx.get(server.url + "/v1/models", timeout=10).json()["data"]
    assert [m["id"] for m in listed] == ["whisper-base", "whisper-1", "base", "Systran/faster-whisper-base"]


def _openai(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=WAIT_S)


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # OpenAI deprecates its translations endpoint
def test_translations_and_prompts_are_served(server, clips):
    """The openai client's translation runs Whisper's translate task, target-only (tiny.en cannot translate),
    and says so; its prompt reaches the target and the answer is still exact."""
    client = _openai(server)
    translated = client.audio.translations.create(model="whisper-1", file=("a.wav", clips["a"]),
                                                  response_format="verbose_json", extra_body={"check": "true"})
    ours = translated.model_extra["as2d"]
    assert translated.model_extra["task"] == "translate" and ours["exact"] is True and translated.text.strip()
    assert ours["source"] is None and any("does not draft the task 'translate'" in note for note in ours["notes"])
    prompted = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", clips["a"]),
                                                  response_format="verbose_json", prompt="Printing, in the",
                                                  extra_body={"check": "true"})
    assert prompted.model_extra["as2d"]["exact"] is True and prompted.model_extra["task"] == "transcribe"
    assert prompted.text.strip()
    sampled = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", clips["a"]), temperature=0.7,
                                                 response_format="verbose_json", extra_body={"check": "true"})
    assert sampled.model_extra["as2d"]["exact"] is True  # sampled with the seed: target-only draws the same
    assert sampled.segments and all(s.temperature == 0.7 for s in sampled.segments)


def test_faster_whispers_options_in_the_form_give_its_segments(server, speech):
    """A request sets faster-whisper's decoding options under its names (the openai client's ``extra_body``):
    beam 5, conditioning, vad_filter and no log-probability threshold give faster-whisper's own segments at
    those settings, exact against the target's own beam search."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check

    paused = np.concatenate([speech[: 5 * 16_000], np.zeros(3 * 16_000, speech.dtype), speech[5 * 16_000: 10 * 16_000]])
    settings = {"beam_size": 5, "condition_on_previous_text": True, "vad_filter": True, "log_prob_threshold": None}
    served = _openai(server).audio.transcriptions.create(
        model="whisper-1", file=("paused.wav", _wav(paused)), response_format="verbose_json",
        extra_body={**{k: str(v).lower() for k, v in settings.items()}, "check": "true"})
    assert served.model_extra["as2d"]["exact"] is True and served.model_extra["as2d"]["method"] == "beam"
    theirs, _ = word_check.faster_whisper_model().transcribe(paused.astype(np.float32) / 32768, language="en",
                                                             **settings)
    # the times too: vad_filter moves them (without it both give 8.64 s and 12.56 s here, with it 8.62 s and 12.58 s)
    assert [(s.start, s.end, s.text) for s in served.segments] == [(s.start, s.end, s.text) for s in theirs]


def test_openais_chunking_strategy_gives_faster_whispers_vad_filter(server, speech):
    """The openai client's ``chunking_strategy``: ``auto`` is faster-whisper's ``vad_filter=True``, and a
    ``server_vad`` object's threshold, pause and padding are its ``vad_parameters``; each gives faster-whisper's
    segments at the server's settings (greedy, the fallback, no conditioning), exact against target-only."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check

    pause = np.zeros(int(1.2 * 16_000), speech.dtype)  # over the server_vad object's pause, under auto's 2 s
    paused = np.concatenate([speech[: 5 * 16_000], pause, speech[5 * 16_000: 10 * 16_000], pause,
                             speech[10 * 16_000: 14 * 16_000]])
    samples = paused.astype(np.float32) / 32768
    server_vad = {"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 600, "prefix_padding_ms": 100}
    theirs_vad = {"threshold": 0.6, "min_silence_duration_ms": 600, "speech_pad_ms": 100}
    for strategy, parameters in (("auto", None), (server_vad, theirs_vad)):
        served = _openai(server).audio.transcriptions.create(
            model="whisper-1", file=("paused.wav", _wav(paused)), response_format="verbose_json",
            chunking_strategy=strategy, extra_body={"check": "true"})
        assert served.model_extra["as2d"]["exact"] is True, strategy
        theirs, _ = word_check.faster_whisper_model().transcribe(
            samples, language="en", beam_size=1, condition_on_previous_text=False, vad_filter=True,
            vad_parameters=parameters)
        assert [(s.start, s.end, s.text) for s in served.segments] == [(s.start, s.end, s.text) for s in theirs], \
            strategy


def test_a_forced_prefix_and_score_rules_in_the_form_give_faster_whispers_tokens(server, speech):
    """``prefix``, ``no_repeat_ngram_size`` and ``suppress_tokens`` (no commas) in ``extra_body``: faster-whisper's
    segments at the server's settings (greedy, the fallback, no conditioning), the first starting with the prefix,
    exact against target-only decoding with the same rules."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check

    settings = {"prefix": "So", "no_repeat_ngram_size": 3, "suppress_tokens": "-1,11"}
    served = _openai(server).audio.transcriptions.create(
        model="whisper-1", file=("speech.wav", _wav(speech)), response_format="verbose_json",
        extra_body={**{k: str(v) for k, v in settings.items()}, "check": "true"})
    assert served.model_extra["as2d"]["exact"] is True
    theirs, _ = word_check.faster_whisper_model().transcribe(
        speech.astype(np.float32) / 32768, language="en", beam_size=1, condition_on_previous_text=False,
        **{**settings, "suppress_tokens": [-1, 11]})
    assert [(s.start, s.end, s.text) for s in served.segments] == [(s.start, s.end, s.text) for s in theirs]
    assert served.segments[0].text.startswith(" So") and "," not in served.text


def test_openai_client_streams_verified_deltas(server, clips, target_only):
    """stream=True: OpenAI's transcription events, whose deltas spell the final text, which is as2d's
    non-streamed answer (the target's own greedy text); each delta is verified text, never revised."""
    events = list(_openai(server).audio.transcriptions.create(model="whisper-1", file=("a.wav", clips["a"]),
                                                              stream=True))
    *deltas, done = events
    assert [e.type for e in deltas] == ["transcript.text.delta"] * len(deltas) and done.type == "transcript.text.done"
    assert len(deltas) > 1 and "".join(e.delta for e in deltas) == done.text == target_only["a"][1]
    tokens = done.model_extra["as2d"]["tokens"]
    assert tokens == target_only["a"][0] and done.usage.output_tokens == done.usage.total_tokens == len(tokens)


def test_openai_client_gets_words_and_segments(server, clips, target_only):
    """verbose_json with timestamp_granularities word and segment (sent as timestamp_granularities[]): Whisper's
    timestamp segments (exact in timestamp mode) and every word, in order, spelling the text; the spelling
    without brackets (timestamp_granularities=word) gives the words too."""
    both = _openai(server).audio.transcriptions.create(
        model="whisper-1", file=("a.wav", clips["a"]), response_format="verbose_json",
        timestamp_granularities=["word", "segment"], extra_body={"check": "true"})
    assert both.model_extra["as2d"]["exact"] is True
    timestamp_begin = 50364  # whisper-base's <|0.00|>: each segment opens with its timestamp
    assert both.segments and all(s.tokens[0] >= timestamp_begin and s.start < s.end <= 4.0 for s in both.segments)
    # the window's scores, as faster-whisper computes them (tests/test_whisper_model.py compares the values)
    assert all(-1.0 < s.avg_logprob < 0 and 0 <= s.no_speech_prob < 0.5 and s.compression_ratio > 0
               and s.temperature == 0 for s in both.segments)
    assert "".join(w.word for w in both.words) == "".join(both.text.split())
    assert all(0 <= w.start <= w.end <= 4.0 for w in both.words)
    assert all(a.end <= b.start for a, b in zip(both.words, both.words[1:]))
    words = server.post(clips["a"], response_format="verbose_json", timestamp_granularities="word").json()
    assert (words["text"], words["as2d"]["tokens"]) == target_only["a-segmented"][::-1]
    assert "".join(w["word"] for w in words["words"]) == "".join(words["text"].split())
    joined, apart = (server.post(clips["b"], response_format="verbose_json", timestamp_granularities="word",
                                 **marks).json() for marks in ({}, {"append_punctuations": ","}))
    # faster-whisper's option: only commas join the word before them (the clip's last period stands alone)
    assert "".join(w["word"] for w in apart["words"]) == "".join(w["word"] for w in joined["words"])
    assert len(apart["words"]) > len(joined["words"]) and apart["as2d"]["tokens"] == joined["as2d"]["tokens"]


def test_a_streaming_client_that_leaves_stops_its_decode(server, clips):
    stopped = 'as2d_decodes_stopped_total{reason="client disconnected"}'
    before = server.metric(stopped)
    with httpx.stream("POST", server.url + "/v1/audio/transcriptions", timeout=WAIT_S,
                      files={"file": ("long.wav", clips["long"], "audio/wav")},
                      data={"model": "whisper-1", "stream": "true", "check": "true"}) as response:  # check: a target-only decode follows
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        first = json.loads(next(response.iter_lines()).removeprefix("data: "))
        assert first["type"] == "transcript.text.delta" and first["delta"]
    server.wait_for(lambda s: s["active"] == 0, "the slot is free again")
    assert server.metric(stopped) == before + 1  # stopped at a target call, not finished


def _bad_inputs(speech, clips):
    nan = speech[: 16_000].astype(np.float32) / 32768
    nan[100] = np.nan
    return [
        ("empty", b"", {}, 400, "empty"),
        ("not audio", b"this is a text file, not audio\n" * 50, {}, 400, "not audio"),
        ("truncated", clips["a"][: len(clips["a"]) // 2], {}, 400, "truncated"),
        ("NaN samples", _wav(nan, "FLOAT"), {}, 400, "NaN"),
        ("unknown language", clips["a"], {"language": "xx"}, 400, "no language 'xx'"),
        ("malformed language", clips["a"], {"language": "../../etc"}, 400, "unknown language"),
        ("unknown source", clips["a"], {"source": "no-such-drafter"}, 400, "unknown source 'no-such-drafter'"),
        ("budget 0", clips["a"], {"budget": 0}, 400, "budget must be between 1 and 64"),
        ("budget 65", clips["a"], {"budget": 65}, 400, "budget must be between 1 and 64"),
        ("budget text", clips["a"], {"budget": "many"}, 400, "budget must be a whole number"),
        ("oversize", b"\0" * (2 * 1024 * 1024), {}, 413, "larger than this server's limit"),
        ("no model", clips["a"], {"model": None}, 400, "you must provide a model parameter"),
        ("long prompt", clips["a"], {"prompt": "one " * 300}, 400, "the prompt is 300 tokens; whisper-base takes"),
        ("temperature", clips["a"], {"temperature": 1.7}, 400, "temperature must be a number from 0 to 1"),
        ("response format", clips["a"], {"response_format": "xml"}, 400, "unknown response_format"),
        ("beam size 0", clips["a"], {"beam_size": 0}, 400, "beam_size must be between 1 and 16, got 0"),
        ("beam size text", clips["a"], {"beam_size": "wide"}, 400, "beam_size must be a whole number, not 'wide'"),
        ("patience nan", clips["a"], {"patience": "nan"}, 400, "patience must be a number, not 'nan'"),
        ("vad flag", clips["a"], {"vad_filter": "maybe"}, 400, "'vad_filter' must be true or false"),
        ("threshold", clips["a"], {"log_prob_threshold": "low"}, 400, "log_prob_threshold must be a number or none"),
        ("unknown field", clips["a"], {"chunk_size": 20}, 400, "unknown form field 'chunk_size'"),
        ("chunk length", clips["a"], {"chunk_length": 31}, 400, "chunk_length must be between 1 and 30, got 31"),
        ("clips", clips["a"], {"clip_timestamps": "1,soon"}, 400, "clip_timestamps must be seconds of at least 0"),
        ("model", clips["a"], {"model": "gpt-4o-transcribe"}, 400, "unknown model 'gpt-4o-transcribe'; this "
         "server runs whisper-base (also accepted: whisper-1, base, Systran/faster-whisper-base)"),
        ("method", clips["a"], {"method": "beam"}, 400, "unknown method"),
        ("granularity", clips["a"], {"timestamp_granularities[]": "sentence", "response_format": "verbose_json"}, 400,
         "unknown timestamp granularity 'sentence'; choose word or segment"),
        ("granularity format", clips["a"], {"timestamp_granularities": "word"}, 400,
         "timestamp_granularities need response_format 'verbose_json'"),
        ("stream subtitles", clips["a"], {"stream": "true", "response_format": "srt"}, 400,
         "stream=true sends text only"),
        ("stream segments", clips["a"], {"stream": "true", "response_format": "verbose_json"}, 400,
         "stream=true sends text only"),
        ("stream flag", clips["a"], {"stream": "maybe"}, 400, "'stream' must be true or false"),
        ("chunking", clips["a"], {"chunking_strategy": "manual"}, 400,
         "chunking_strategy must be 'auto' or a server_vad object, not 'manual'"),
        ("chunking type", clips["a"], {"chunking_strategy[type]": "semantic_vad"}, 400,
         "chunking_strategy's type must be 'server_vad', not 'semantic_vad'"),
        ("chunking threshold", clips["a"], {"chunking_strategy[type]": "server_vad",
                                            "chunking_strategy[threshold]": "2"}, 400,
         "chunking_strategy's threshold must be a number from 0 to 1, not '2'"),
        ("chunking pause", clips["a"], {"chunking_strategy": '{"type": "server_vad", "silence_duration_ms": 2.5}'},
         400, "chunking_strategy's silence_duration_ms must be a whole number of milliseconds, 0 or more, not 2.5"),
        ("chunking field", clips["a"], {"chunking_strategy": '{"type": "server_vad", "eagerness": "low"}'}, 400,
         "unknown chunking_strategy field 'eagerness'"),
        ("chunking twice", clips["a"], {"chunking_strategy": "auto", "chunking_strategy[type]": "server_vad"}, 400,
         "give chunking_strategy as one value or as its fields, not both"),
        ("chunking without vad", clips["a"], {"chunking_strategy": "auto", "vad_filter": "false"}, 400,
         "vad_filter=false asks for no detector"),
        ("stream long prompt", clips["a"], {"stream": "true", "prompt": "one " * 300}, 400,
         "the prompt is 300 tokens"),  # refused before the first event: a status, not an event
    ]


def test_bad_input_matrix_answers_4xx_and_the_next_request_is_served(server, speech, clips, target_only):
    for name, data, fields, status, message in _bad_inputs(speech, clips):
        counted = server.metric(f'as2d_requests_total{{status="{status}"}}')
        response = server.post(data, **fields)
        assert response.status_code == status, (name, response.text)
        assert message in response.json()["error"]["message"], name
        assert server.health()["status"] == "ok", name
        assert server.metric(f'as2d_requests_total{{status="{status}"}}') == counted + 1, name  # every status
    missing = server.post(clips["a"], model=None).json()["error"]
    assert (missing["param"], missing["type"]) == ("model", "invalid_request_error")  # as OpenAI answers
    chunked = httpx.post(server.url + "/v1/audio/transcriptions", content=(b"\0" * 65536 for _ in range(40)),
                         headers={"Content-Type": "multipart/form-data; boundary=x"}, timeout=WAIT_S)
    assert chunked.status_code == 413  # no length declared: counted as it arrives
    # a server path in place of an upload is just a missing upload: nothing on disk is read
    by_path = httpx.post(server.url + "/v1/audio/transcriptions", data={"file": "/etc/passwd"}, timeout=WAIT_S)
    assert by_path.status_code == 400 and "multipart field 'file'" in by_path.json()["error"]["message"]
    assert server.post(clips["b"]).json()["text"] == target_only["b"][1]


def test_audio_over_one_window_is_transcribed_window_by_window(server, speech):
    long = _wav(np.concatenate([speech, speech[: 8 * 16_000]]))  # 34 s: two windows, never cut silently
    body = server.post(long, response_format="verbose_json", check="true").json()
    assert body["duration"] == pytest.approx(34.0, abs=0.01)
    assert len(body["segments"]) >= 2 and body["segments"][-1]["end"] > 30
    assert body["as2d"]["exact"] is True  # every window equals target-only on that window
    assert body["text"] == " ".join(segment["text"].strip() for segment in body["segments"])


def test_chunk_length_in_the_form_makes_shorter_requests(server, speech):
    """``chunk_length=10`` (faster-whisper's, a form field): each request reads 10 s from its seek, exact."""
    body = server.post(_wav(speech[: 16 * 16_000]), response_format="verbose_json", check="true",
                       chunk_length="10").json()
    seeks = sorted({segment["seek"] for segment in body["segments"]})
    assert body["as2d"]["exact"] is True and len(seeks) >= 2 and all(b - a <= 1000 for a, b in zip(seeks, seeks[1:]))


def test_eight_concurrent_clients_are_all_answered_exactly(server, clips, target_only):
    answers: dict[int, httpx.Response] = {}

    def client(i: int) -> None:
        answers[i] = server.post(clips["ab"[i % 2]], response_format="verbose_json")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 4)
    assert sorted(answers) == list(range(8))
    for i, response in answers.items():
        assert response.status_code == 200, response.text
        assert response.json()["as2d"]["tokens"] == target_only["ab"[i % 2] + "-segmented"][0]


def disconnect_while_decoding(server, data: bytes) -> None:
    """Send ``data`` (checked, so it decodes twice) on a raw socket and close it once its decode runs; the
    server must stop the decode, answer 499 and free the slot."""
    before = server.metric('as2d_requests_total{status="499"}')
    body = b"".join([
        b"--cut\r\nContent-Disposition: form-data; name=\"check\"\r\n\r\ntrue\r\n",
        b"--cut\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n",
        b"--cut\r\nContent-Disposition: form-data; name=\"file\"; filename=\"long.wav\"\r\n"
        b"Content-Type: audio/wav\r\n\r\n", data, b"\r\n--cut--\r\n"])
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: multipart/form-data; boundary=cut\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(head + body)
        server.wait_for(lambda s: s["active"] == 1, "the long request is decoding")
    server.wait_for(lambda s: s["active"] == 0, "the slot is free again")
    assert server.metric('as2d_requests_total{status="499"}') == before + 1  # stopped, not finished


def test_a_client_that_disconnects_frees_its_slot(server, clips):
    disconnect_while_decoding(server, clips["long"])


@pytest.fixture(scope="module")
def faulty_server():
    args = [arg for kind in FAULTS for arg in ("--fault", kind)]
    s = Server(*args, "--fault-every", "1", "--stall-s", "2")
    yield s
    s.stop()


def test_every_drafter_fault_leaves_the_answer_exact(faulty_server, clips, target_only):
    seen = {}
    for _ in range(len(FAULTS)):
        # the language named: the drafter runs at the target's priority, so its fault lands soon on a busy machine
        body = faulty_server.post(clips["a"], response_format="verbose_json", check="true", language="en").json()
        assert body["as2d"]["tokens"] == target_only["a-segmented"][0], body["as2d"]["fault"]
        assert body["as2d"]["exact"] is True
        seen[body["as2d"]["fault"]] = body["as2d"]
    assert set(seen) == set(FAULTS)
    for kind in ("raise", "stall", "garbage-out"):  # these break the drafter; it is rebuilt for the next request
        assert seen[kind]["drafter_error"] and seen[kind]["drafter_rebuilt"], kind
    assert "outside the target vocabulary" in seen["garbage-out"]["drafter_error"]
    for kind in FAULTS:
        assert faulty_server.metric(f'as2d_drafter_faults_total{{kind="{kind}"}}') == 1, kind
    assert faulty_server.metric("as2d_drafter_rebuilds_total") >= 3


@pytest.fixture(scope="module")
def tight_server():
    import os

    env = dict(os.environ, AS2D_API_KEY="s3cret")
    s = Server("--queue-size", "0", "--deadline", "0.5", env=env)
    yield s
    s.stop()


def test_api_key_deadline_and_full_queue(tight_server, clips):
    key = {"Authorization": "Bearer s3cret"}
    assert tight_server.post(clips["a"]).status_code == 401
    assert tight_server.post(clips["a"], headers={"Authorization": "Bearer s3cre"}).status_code == 401
    assert httpx.get(tight_server.url + "/metrics", timeout=10).status_code == 401
    answers = {}
    slow = threading.Thread(target=lambda: answers.update(slow=tight_server.post(clips["file"], headers=key,
                                                                                 check="true")))
    slow.start()
    tight_server.wait_for(lambda s: s["active"] == 1, "the file's request holds the only slot")
    refused = tight_server.post(clips["a"], headers=key)
    slow.join(WAIT_S)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert answers["slow"].status_code == 504
    assert "deadline of 0.5 s for each 30 s of audio" in answers["slow"].json()["error"]["message"]
    tight_server.wait_for(lambda s: s["active"] == 0, "the slot is free after the deadline")


def test_the_deadline_grows_with_the_audio():
    """A long upload is given one deadline for each started 30 s window (a 330 s file under load took over the
    default 120 s before), a short one the deadline itself."""
    from as2d_serve.admission import Limits

    limits = Limits(deadline_s=120)
    assert [limits.deadline_for(s) for s in (0.0, 4.0, 30.0, 30.1, 330.0)] == [120, 120, 120, 240, 1320]
