"""SIGINT and SIGTERM stop ``as2d run`` and ``as2d stream`` cleanly: a one-line message, status 128+signal,
no traceback, no native crash (the drafter is stopped and joined on the way out)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from as2d_core.input.audio import load_audio

DATA = Path(__file__).resolve().parent / "data" / "clips"


@pytest.fixture(scope="module")
def minutes_of_speech(tmp_path_factory) -> Path:
    """Three minutes of real speech (the repository's clips back to back, five times): many windows to decode."""
    clips = [load_audio(path) for path in sorted(DATA.glob("*.wav"))]
    path = tmp_path_factory.mktemp("signals") / "minutes.wav"
    soundfile.write(path, np.concatenate(clips * 5), 16_000)
    return path


def _catches(pid: int, number: int) -> bool:
    """Whether process ``pid`` has a handler for signal ``number`` (Linux: SigCgt in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return False


def _interrupted(args: list[str], number: int, after_s: float) -> subprocess.CompletedProcess:
    """Start ``as2d ARGS``, wait until it handles signals and ``after_s`` more (models load, decoding starts),
    send ``number``, and return how it ended."""
    process = subprocess.Popen([sys.executable, "-m", "as2d_core.cli.main", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not _catches(process.pid, number):
        assert process.poll() is None and time.monotonic() < deadline, "as2d never installed its signal handlers"
        time.sleep(0.05)
    time.sleep(after_s)
    process.send_signal(number)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("number, after_s", [(signal.SIGTERM, 4.0), (signal.SIGINT, 4.0), (signal.SIGTERM, 0.0)])
def test_run_stops_cleanly(whisper_target, whisper_ct2_source, minutes_of_speech, number, after_s):
    done = _interrupted(["run", str(minutes_of_speech), "--language", "en"], number, after_s)
    assert done.returncode == 128 + number, done.stderr[-2000:]
    assert f"stopped by {signal.Signals(number).name}" in done.stderr
    assert "Traceback" not in done.stderr and "terminate called" not in done.stderr, done.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask from /proc")
def test_stream_stops_cleanly(whisper_target, whisper_ct2_source, minutes_of_speech):
    done = _interrupted(["stream", str(minutes_of_speech), "--language", "en", "--pace", "realtime"],
                        signal.SIGTERM, 6.0)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "stopped by SIGTERM" in done.stderr
    assert "Traceback" not in done.stderr and "terminate called" not in done.stderr, done.stderr[-2000:]


@pytest.fixture
def stopping():
    """The command line's stop handling installed in this process, and everything put back afterwards."""
    from as2d_core.cli import stopping

    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)
    before = {n: signal.getsignal(n) for n in numbers}
    stopping.catch_stops()
    try:
        yield stopping
    finally:
        stopping.stop_over()
        stopping.received.clear()
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_a_stop_a_library_drops_is_raised_again(stopping):
    try:  # SIGTERM arrives; the code it interrupts drops the stop (as PyAV's decoder did, about 1 stop in 5)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # the handler runs here
    except stopping.Stopped:
        pass
    assert stopping.received == [signal.SIGTERM]
    deadline = time.monotonic() + 10 * stopping.STOP_AGAIN_S
    with pytest.raises(stopping.Stopped):
        while time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")
def test_cleanup_that_unwinds_a_stop_is_not_stopped_again(stopping):
    cleaned = False
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)
    except stopping.Stopped:
        time.sleep(4 * stopping.STOP_AGAIN_S)  # cleanup on the way out: nothing interrupts it
        cleaned = True
    assert cleaned
