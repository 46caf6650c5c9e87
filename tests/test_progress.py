"""Progress bars: ``as2d run`` on a terminal (a real pseudo-terminal), silent when piped or ``--quiet``; and
``WhisperModel.transcribe(log_progress=True)`` ending at 100% with rounded values."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
import soundfile

from as2d_core.cli.progress import AudioProgress
from conftest import full_only

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "examples" / "ljspeech_en_w00.wav"
RUN = [sys.executable, "-m", "as2d_core.cli.main", "run", "--method", "target-only", "--language", "en"]
BAR = re.compile(r"(\d+)%\|[^|]*\| ([\d.]+)/([\d.]+) audio s")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    speech, rate = soundfile.read(BUNDLED, dtype="float32")
    path = tmp_path_factory.mktemp("progress") / "clip.wav"
    soundfile.write(path, speech[: 8 * rate], rate)
    return path


def _on_terminal(args: list[str]) -> str:
    """What the command writes to stderr when stderr is a terminal (100 columns wide)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=terminal, cwd=REPO)
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal's other end is closed
            break
        if not chunk:
            break
        out += chunk
    os.close(controller)
    assert process.wait(120) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


@full_only  # three runs of `as2d run` on a terminal; the bar itself is checked below
def test_run_shows_a_bar_on_a_terminal_only(clip):
    out = _on_terminal([*RUN, str(clip)])
    shown = BAR.findall(out)
    assert shown and shown[-1] == ("100", "8.00", "8.00") and " audio s/s" in out  # seconds of audio, speed
    assert not BAR.findall(_on_terminal([*RUN, str(clip), "--quiet"]))
    piped = subprocess.run([*RUN, str(clip)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert piped.returncode == 0 and piped.stdout.strip() and "%|" not in piped.stderr


def test_a_bar_ends_at_its_total_without_float_noise(capsys):
    with AudioProgress(3.3, enabled=True) as progress:
        for step in range(1, 32):  # 0.1 s at a time: summed floats would show 3.1000000000000005
            progress.advance_to(step * 0.1)
        assert progress.done_s == 3.1
    err = capsys.readouterr().err
    assert BAR.findall(err)[-1] == ("100", "3.30", "3.30")
    assert not re.search(r"\d\.\d{3,}", err.replace("audio s/s", ""))  # no long fractions but in the speed
    with AudioProgress(3.3, enabled=False) as progress:
        progress.advance_to(1.0)
    assert capsys.readouterr().err == ""


def test_log_progress_ends_at_100_percent(capsys):
    from as2d import WhisperModel

    speech, rate = soundfile.read(BUNDLED, dtype="float32")
    audio = np.concatenate([speech[: 12 * rate], np.zeros(3 * rate, np.float32)] * 3)  # silence at the end too
    # temperature 0: the repeated clip's text would send every request through the fallback
    segments, _ = WhisperModel("base", source=None).transcribe(audio, language="en", log_progress=True,
                                                               temperature=0.0)
    assert list(segments)
    bars = re.findall(r"(\d+)%\|[^|]*\| ([\d.]+)/([\d.]+) seconds", capsys.readouterr().err)
    assert len(bars) >= 3 and bars[-1] == ("100", "45.00", "45.00")
    assert all(len(done.split(".")[1]) == 2 for _, done, _ in bars)
