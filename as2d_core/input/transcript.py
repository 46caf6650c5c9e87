"""What transcribing a file gives: each window's (or long-form request's) result, and the whole transcript."""
from __future__ import annotations

import attrs

from as2d_core.decode.result import DecodeResult
from as2d_core.decode.timestamps import Segment
from as2d_core.input.audio import AudioInfo
from as2d_core.input.windows import SpeechMap, Window


@attrs.define
class WindowResult:
    window: Window
    result: DecodeResult
    reference: DecodeResult | None = None  # target-only on the same window, when checked
    silent: bool = False  # a long-form request the no-speech rule dropped: none of its text is kept
    # long-form (seek) transcription: the temperature of the kept attempt and how many attempts the fallback made
    temperature: float | None = None
    attempts: int = 1
    speech: SpeechMap | None = None  # the window's times are in speech joined by vad_filter: mapped back to the audio

    @property
    def start_s(self) -> float:
        return self.window.start_s if self.speech is None else self.speech.original_s(self.window.start_s)

    @property
    def end_s(self) -> float:
        return self.window.end_s if self.speech is None else self.speech.original_s(self.window.end_s, is_end=True)

    @property
    def text(self) -> str:
        return self.result.text.strip()

    @property
    def tokens(self) -> list[int]:
        return self.result.tokens

    @property
    def exact(self) -> bool | None:
        return None if self.reference is None else self.result.tokens == self.reference.tokens

    @property
    def segments(self) -> list[Segment]:
        """The window's segments, their times in the whole file."""
        shifted = [segment.shifted(self.window.start_s) for segment in self.result.segments]
        return shifted if self.speech is None else self.speech.segments(shifted)

    def as_dict(self) -> dict:
        out = {"index": self.window.index, "start_s": self.start_s, "end_s": self.end_s, **self.result.summary()}
        out["text"] = self.text
        if self.temperature is not None:
            out["temperature"], out["attempts"] = self.temperature, self.attempts
        out["segments"] = [segment.as_dict() for segment in self.segments]
        if self.result.words_s is not None:
            out["words"] = [word.shifted(self.start_s).as_dict() for word in self.result.words]
        if self.reference is not None:
            out["exact"] = self.exact
            out["target_only_decode_s"] = self.reference.decode_s
            if self.reference.words_s is not None:  # timing words costs every method the same: shown side by side
                out["words_exact"] = self.reference.words == self.result.words
                out["target_only_words_s"] = self.reference.words_s
        return out


@attrs.define
class Transcript:
    windows: list[WindowResult]
    skipped: tuple[tuple[float, float], ...]  # stretches the detector found no speech in, or outside the clips
    duration_s: float
    wall_s: float  # whole file: windowing, every window's preparation and decoding (checks excluded)
    detector: str | None
    audio: AudioInfo | None = None
    notes: list[str] = attrs.Factory(list)
    # how the file was decoded: route, wave_size, drafts and why (``input.waves.WaveRoute.as_dict``)
    route: dict | None = None

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.windows if w.text)

    @property
    def segments(self) -> list[Segment]:
        """Every window's segments in order, their times in the whole file."""
        return [segment for w in self.windows for segment in w.segments]

    @property
    def exact(self) -> bool | None:
        if not self.windows or any(w.reference is None for w in self.windows):
            return None
        return all(w.exact for w in self.windows)

    def totals(self) -> dict:
        results = [w.result for w in self.windows]
        decode_s = sum(r.decode_s for r in results)
        out = {
            "windows": len(results),
            "tokens": sum(len(r.tokens) for r in results),
            "decode_s": decode_s,
            "e2e_s": sum(r.e2e_s for r in results),
            "wall_s": self.wall_s,
            "rtf": self.wall_s / self.duration_s if self.duration_s else None,
            "proposed": sum(r.proposed for r in results),
            "accepted": sum(r.accepted for r in results),
            "drafter_failures": sum(1 for r in results if r.producer_error),
        }
        out["tps"] = out["tokens"] / decode_s if decode_s > 0 else 0.0
        references = [w.reference for w in self.windows if w.reference is not None]
        if references and len(references) == len(results):
            reference_s = sum(r.decode_s for r in references)
            out["target_only_decode_s"] = reference_s
            out["speedup"] = reference_s / decode_s if decode_s > 0 else None
            out["target_only_e2e_s"] = sum(r.e2e_s for r in references)
            out["e2e_speedup"] = out["target_only_e2e_s"] / out["e2e_s"] if out["e2e_s"] > 0 else None
            out["exact"] = self.exact
        for name, runs in (("words_s", results), ("target_only_words_s", references)):  # timing words, by method
            if runs and all(r.words_s is not None for r in runs):
                out[name] = sum(r.words_s for r in runs)
        return out

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "duration_s": self.duration_s,
            "detector": self.detector,
            "audio": self.audio.as_dict() if self.audio is not None else None,
            "windows": [w.as_dict() for w in self.windows],
            "segments": [{"id": i, "window": w.window.index, **segment.as_dict()}
                         for i, (w, segment) in enumerate((w, s) for w in self.windows for s in w.segments)],
            "skipped_silence": [{"start_s": a, "end_s": b} for a, b in self.skipped],
            "totals": self.totals(),
            "notes": self.notes,
            "route": self.route,
        }
