"""faster-whisper's ``BatchedInferencePipeline`` on as2d: ``from as2d import BatchedInferencePipeline``.

faster-whisper's batched pipeline decodes a file's speech chunks side by side, ``batch_size`` at a time,
each chunk on its own (no previous text, no temperature fallback): with ``vad_filter`` the speech Silero VAD
finds, joined and cut between its spans into chunks of at most 30 s. as2d's batched route does the same with
the same windows: ``DecodeOptions.batch_windows`` windows decoded in waves, each window in a thread of its own,
their verifications made in one call of the target's windows graph, and each window's tokens still exactly
its own greedy output. The segments and the info are ``WhisperModel.transcribe``'s, which this runs.
``batch_size="auto"`` (as2d's default; faster-whisper's is 8) prices the wave size and whether the windows draft
from a device profile (``profile=``), else takes waves of 4 drafting (``as2d_core.input.waves``); a number is the
wave size, its windows drafting unless the profile prices that above target-only. With ``beam_size`` over 1
the windows' beam searches step side by side in waves of ``batch_size`` (auto: 4), one call a step for all
their rows, as faster-whisper's batched pipeline searches its batch. ``info.route`` says what was taken and why.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import attrs
import numpy as np

from as2d_core.capabilities import TextEncoder
from as2d_core.decode.options import AUTO, DEFAULT_TEMPERATURES, MAX_BATCH_WINDOWS, wave_size
from as2d_core.decode.profile import read_profile

from .objects import Segment, TranscriptionInfo
from .transcribe import WhisperModel


class BatchedInferencePipeline:
    """Windows of one file decoded side by side over a loaded ``WhisperModel`` (which keeps serving alone)."""

    def __init__(self, model: WhisperModel, profile: str | None = None):
        """``profile`` (as2d's own): a device profile (``as2d profile``) whose batch costs price ``batch_size="auto"``
        (default: the model's)."""
        if not isinstance(model, WhisperModel):
            raise TypeError(f"BatchedInferencePipeline takes an as2d WhisperModel, not {type(model).__name__}")
        if profile is not None:
            read_profile(profile)  # a file that is no profile fails here
        self.model, self.profile = model, None if profile is None else str(profile)

    def transcribe(
        self,
        audio: str | BinaryIO | np.ndarray,
        language: str | None = None,
        task: str = "transcribe",
        log_progress: bool = False,
        beam_size: int = 1,
        *,
        temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
        condition_on_previous_text: bool = True,
        without_timestamps: bool = True,
        vad_filter: bool = True,
        clip_timestamps: list[dict] | None = None,
        batch_size: int | str = AUTO,
        **options: Any,
    ) -> tuple[Iterator[Segment], TranscriptionInfo]:
        """faster-whisper's batched ``transcribe``: up to ``batch_size`` windows decoded at once (``"auto"``: the
        size and whether the windows draft priced from the profile, else waves of 4 drafting; a number: whether
        they draft priced from the profile, else drafting; ``info.route``).

        As in faster-whisper's batched pipeline, no window is conditioned on the text before it
        (``condition_on_previous_text`` is taken and set off), only the first temperature is used (no
        fallback), ``prefix`` and ``max_initial_timestamp`` are taken and not used (the first timestamp is at most
        1 s), ``without_timestamps`` is on by default, so each window is one segment, and so is ``vad_filter``:
        the speech Silero VAD finds (pauses of 0.16 s, padded by 0.4 s) joined and cut between its spans into
        windows (off: the audio cut every 30 s). ``initial_prompt`` text is every window's prompt, encoded as
        faster-whisper's batched pipeline encodes it (as it is, with no space put before it). Every window's
        text is kept (no no-speech rule, as there). Every other option is ``WhisperModel.transcribe``'s, with its
        defaults and its refusals; greedy decoding (``beam_size=1``, the default here; faster-whisper's is 5).
        """
        if batch_size != AUTO and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or not 1 <= batch_size <= MAX_BATCH_WINDOWS):
            raise ValueError(f"batch_size must be a whole number from 1 to {MAX_BATCH_WINDOWS} (windows decoded side "
                             f"by side) or {AUTO!r}, got {batch_size!r}")
        for unused in ("prefix", "max_initial_timestamp"):  # faster-whisper's batched pipeline does not use them
            options.pop(unused, None)
        first_temperature = temperature[0] if isinstance(temperature, (list, tuple)) else temperature
        prompt = options.get("initial_prompt")
        if isinstance(prompt, str) and isinstance(self.model.target, TextEncoder):  # as faster-whisper's batched
            options["initial_prompt"] = self.model.target.encode_text(prompt)  # pipeline encodes it: no space put first
        side_by_side = copy.copy(self.model)  # the same loaded parts, lock and detectors; its own decoding options
        side_by_side.decode_options = attrs.evolve(self.model.decode_options, batch_windows=wave_size(batch_size),
                                                   route="windows",
                                                   profile=self.profile or self.model.decode_options.profile)
        segments, info = side_by_side.transcribe(
            audio, language, task, log_progress, beam_size, temperature=first_temperature,
            condition_on_previous_text=False, without_timestamps=without_timestamps, vad_filter=vad_filter,
            clip_timestamps="0" if clip_timestamps is None else clip_timestamps, **options)
        info.transcription_options.initial_prompt = prompt  # as the caller gave it
        return segments, info
