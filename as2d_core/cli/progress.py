"""Progress on long work, as faster-whisper's and whisper.cpp's users expect: a bar of audio seconds on stderr.

``as2d run`` shows it when stderr is a terminal (not when piped or redirected, nor with ``--quiet``);
``WhisperModel.transcribe(log_progress=True)`` shows it as faster-whisper does. The bar moves to each
window's end as the window is decoded, shows the speed in audio seconds per second, and ends at 100% of
the audio, silence the detector skipped included. Values are rounded to the hundredth, so no float noise
from summing window lengths reaches the screen.
"""
from __future__ import annotations

import sys

from tqdm import tqdm

BAR = "{percentage:3.0f}%|{bar}| {n:.2f}/{total:.2f}{unit} [{elapsed}<{remaining}, {rate_fmt}]"  # unit: " audio s"


def on_terminal(quiet: bool = False) -> bool:
    """Whether a command shows its bar: stderr is a terminal and the user did not ask for quiet."""
    return not quiet and sys.stderr.isatty()


class AudioProgress:
    """A bar from 0 to ``total_s`` seconds of audio; a context that ends it at 100% when the work succeeds."""

    def __init__(self, total_s: float, enabled: bool, unit: str = " audio s") -> None:
        self.total = round(total_s, 2)
        self._bar = tqdm(total=self.total, disable=not enabled, file=sys.stderr, unit=unit, bar_format=BAR,
                         dynamic_ncols=True)

    @property
    def done_s(self) -> float:
        return self._bar.n

    def advance_to(self, seconds: float) -> None:
        """The audio up to ``seconds`` is done (a bar never goes back)."""
        done = round(min(max(seconds, 0.0), self.total), 2)
        if done > self._bar.n:
            self._bar.update(round(done - self._bar.n, 2))
            self._bar.n = done  # the sum of rounded steps, without its float noise

    def finish(self) -> None:
        self.advance_to(self.total)
        self._bar.close()

    def __enter__(self) -> "AudioProgress":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.finish()
        else:
            self._bar.close()
