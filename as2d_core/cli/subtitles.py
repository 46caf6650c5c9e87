"""SubRip (SRT) and WebVTT text of a transcript: cues that subtitle tools and players can show.

A cue is ``(start_s, end_s, text)`` in the file's time; its text may hold line breaks. A transcript's
cues (:func:`transcript_cues`) come from its segments (one per Whisper timestamp segment in timestamp
mode, one per window without), wrapped to at most ``MAX_LINES`` lines of ``MAX_CHARS`` characters, as
subtitle guidelines ask. A segment too long for one cue becomes several: cut at its words' times when
the words were timed (``--word-timestamps``), else at times in proportion to the characters before the cut.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from as2d_core.decode.words import words_by_segment

MAX_CHARS = 42  # per line: the usual limit of broadcast and streaming subtitle guidelines
MAX_LINES = 2  # per cue

Cue = tuple[float, float, str]


def _timestamp(seconds: float, separator: str) -> str:
    millis = int(round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(cues: Iterable[Cue]) -> list[Cue]:
    # each line's spaces collapsed; no empty line inside a cue (it would end the cue)
    out = []
    for start, end, text in cues:
        lines = [" ".join(line.split()) for line in text.split("\n")]
        if any(lines):
            out.append((start, end, "\n".join(line for line in lines if line)))
    return out


def to_srt(cues: Iterable[Cue]) -> str:
    blocks = [f"{n}\n{_timestamp(a, ',')} --> {_timestamp(b, ',')}\n{text}\n"
              for n, (a, b, text) in enumerate(_cues(cues), start=1)]
    return "\n".join(blocks)


def to_vtt(cues: Iterable[Cue]) -> str:
    blocks = [f"{_timestamp(a, '.')} --> {_timestamp(b, '.')}\n{text}\n" for a, b, text in _cues(cues)]
    return "\n".join(["WEBVTT\n", *blocks])


def wrap(text: str, max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES) -> str | None:
    """``text`` in at most ``max_lines`` lines of at most ``max_chars`` characters, cut at spaces so that
    the longest line is as short as it can be; None when it does not fit."""
    words = text.split()
    if not words:
        return ""
    best: list[str] | None = None

    def fill(rest: list[str], lines: list[str]) -> None:
        nonlocal best
        line = " ".join(rest)
        if len(line) <= max_chars:
            done = [*lines, line]
            if best is None or max(map(len, done)) < max(map(len, best)):
                best = done
            return
        if len(lines) + 1 >= max_lines:
            return
        for cut in range(len(rest) - 1, 0, -1):
            head = " ".join(rest[:cut])
            if len(head) <= max_chars:
                fill(rest[cut:], [*lines, head])

    fill(words, [])
    return None if best is None else "\n".join(best)


def _pieces(words: Sequence[str], max_chars: int, max_lines: int) -> list[list[str]]:
    """``words`` in as few consecutive groups as fit one cue each, as even in length as they can be (no word
    left alone at a cue's end); a word longer than a cue is a group of its own."""
    n = len(words)
    fits = [[j for j in range(i + 1, n + 1) if j == i + 1 or wrap(" ".join(words[i:j]), max_chars, max_lines)
             is not None] for i in range(n)]
    # best[i]: (groups, sum of squared lengths) of the words from i to the end, and where its first group ends
    best: list[tuple[tuple[int, int], int]] = [((0, 0), n)] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i] = min((((best[j][0][0] + 1, best[j][0][1] + len(" ".join(words[i:j])) ** 2), j) for j in fits[i]))
    groups, i = [], 0
    while i < n:
        groups.append(list(words[i : best[i][1]]))
        i = best[i][1]
    return groups


def split_cue(start_s: float, end_s: float, text: str, words: Sequence[Any] | None = None,
              max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES) -> list[Cue]:
    """One segment as cues that each fit ``max_lines`` lines of ``max_chars``.

    ``words``: the segment's timed words (``word``, ``start_s``, ``end_s``), spelling its text; with them a cue
    starts at its first word and ends at its last (the last cue at the segment's end). Without them the
    segment's time is shared in proportion to the characters.
    """
    fitted = wrap(text, max_chars, max_lines)
    if fitted is not None:
        return [(start_s, end_s, fitted)] if fitted else []
    timed = bool(words) and "".join(w.word for w in words).split() == text.split()
    tokens = [w.word.strip() for w in words] if timed else text.split()
    groups = _pieces(tokens, max_chars, max_lines)
    cues, at, total = [], 0, sum(len(t) for t in tokens)
    for n, group in enumerate(groups):
        if timed:
            first, last = words[at], words[at + len(group) - 1]
            a = start_s if n == 0 else first.start_s
            b = end_s if n == len(groups) - 1 else last.end_s
        else:
            before = sum(len(t) for t in tokens[:at])
            a = start_s + (end_s - start_s) * before / total
            b = start_s + (end_s - start_s) * (before + sum(len(t) for t in group)) / total
        cues.append((a, max(a, b), wrap(" ".join(group), max_chars, max_lines) or " ".join(group)))
        at += len(group)
    return cues


def transcript_cues(transcript, max_chars: int = MAX_CHARS, max_lines: int = MAX_LINES) -> list[Cue]:
    """A transcript's (``as2d_core.input.pipeline.Transcript``) segments as wrapped cues, split where too long."""
    cues: list[Cue] = []
    for window in transcript.windows:
        segments = window.segments
        timed = [w.shifted(window.start_s) for w in window.result.words]
        grouped = words_by_segment(segments, timed) if timed else [None] * len(segments)
        for segment, words in zip(segments, grouped):
            cues += split_cue(segment.start_s, segment.end_s, segment.text, words, max_chars, max_lines)
    return cues
