"""Several windows of one target decoded together: one call of the windows graph verifies them all.

A decoder step reads all the decoder's weights however few tokens it appends, so one call over
several windows costs much less than a call per window (``as2d whisper-decoder-profile --batched``).
A window is prepared as it is alone (encoder, prompt and first token on the single-window graph);
then its cache and audio K/V move into a row of the group. The group's cache is position-major,
``[positions, rows, layers, 2, heads, head_dim]``, so the first P positions of every row are one
contiguous block the graph reads in place, and the audio K/V are ``[rows, heads, frames, head_dim]``
per layer: only the rows in the group are computed. Each row has its own length, and the graph masks
what lies past it. When a window leaves, the last row moves into its place and the cache is laid out
again for one row less; a window left alone goes back to the single-window graph. A call appends
every row's tokens at once: a row with fewer tokens is padded, and its padding never enters its
cache; a row not in the call sees none of its cache and keeps nothing of the call. Each row's logits
go to its own session, which applies the suppressions and rules as it does alone.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from as2d_core.contracts import Request

from .graph_io import WINDOWS_FILE, audio_feed, windows_graph_room
from .target import WhisperTargetSession

__all__ = ["WINDOWS_FILE", "WhisperWindowGroup"]


class _Row:
    """A session's place in the group: the single-window decoder state's interface (``length``, ``append``)."""

    def __init__(self, group: "WhisperWindowGroup", row: int):
        self.group, self.row = group, row
        self.threads: int | None = None  # the session's own choice (``use_threads``), for calls it makes alone

    @property
    def length(self) -> int:
        with self.group.lock:  # another window leaving may move this one to another row
            return int(self.group.lengths[self.row])

    @length.setter
    def length(self, value: int) -> None:  # a rejected tail is cut by length, as alone
        with self.group.lock:
            self.group.lengths[self.row] = value

    @property
    def devices(self) -> list[str]:
        return self.group.devices

    def append(self, tokens: Sequence[int]) -> np.ndarray:
        """This row alone in a call of the group (a session used on its own still decodes exactly)."""
        return self.group.append({self: [int(t) for t in tokens]})[self]

    def bind(self, threads: int) -> None:
        """Calls of several rows run on the threads the group was made with; a row alone in the group runs on
        its session's choice, as a session of its own would (fewer beside its drafter)."""
        self.threads = threads

    def close(self) -> None:
        self.group.leave(self)


class WhisperWindowGroup:
    """Up to ``size`` windows of one Whisper target (``WhisperTarget.window_group``)."""

    def __init__(self, target, size: int, threads: int):
        if size < 1:
            raise ValueError(f"a window group needs at least one row, got {size}")
        model = self._model = target.model
        self._target, self.size, self._threads = target, size, threads
        self._session, self._names, self._row_shape, self._audio = windows_graph_room(model, size, threads)
        self._cache = np.zeros((model.max_length, 0, *self._row_shape), np.float32)
        self.lengths = np.zeros(size, np.int64)
        self._rows: list[_Row] = []
        # one call at a time; rows join, leave and change length under it too (re-entrant: a call reads lengths)
        self.lock = threading.RLock()
        self._preparing = threading.Lock()

    @property
    def devices(self) -> list[str]:
        return self._session.get_providers()

    def prepare(self, request: Request, threads: int) -> WhisperTargetSession:
        """The request's session, prepared as alone, its cache and audio K/V moved into the group's next row."""
        with self._preparing:  # one encoder at a time, on all the threads
            session = self._target.prepare(request, threads)
        alone = session.state
        with self.lock:
            if len(self._rows) == self.size:
                session.close()
                raise RuntimeError(f"all {self.size} rows of the window group are taken")
            row = _Row(self, len(self._rows))
            for block, column in zip(audio_feed(alone.audio).values(), self._audio):
                column[row.row] = block
            self.lengths[row.row] = alone.length
            self._lay_out(list(range(len(self._rows))), joining=alone)
            self._rows.append(row)
        alone.close()
        session.state = row
        return session

    def leave(self, row: _Row) -> None:
        """``row``'s window is done: the last row takes its place, and the cache is laid out for one row less."""
        with self.lock:
            last = self._rows.pop()
            columns = list(range(len(self._rows)))  # the old cache's column of each row that stays
            if last is not row:
                for column in self._audio:
                    column[row.row] = column[last.row]
                self.lengths[row.row] = self.lengths[last.row]
                columns[row.row] = last.row
                self._rows[row.row], last.row = last, row.row
            self._lay_out(columns)

    def _lay_out(self, columns: list[int], joining=None) -> None:
        """The cache as one block: the old cache's ``columns``, then the state of a ``joining`` window."""
        width = len(columns) + (joining is not None)
        used = int(self.lengths[:width].max()) if width else 0
        cache = np.zeros((self._model.max_length, width, *self._row_shape), np.float32)
        cache[:used, : len(columns)] = self._cache[:used, columns]
        if joining is not None:
            cache[: joining.length, -1] = joining.cache[: joining.length]
        self._cache = cache

    def verify_rows(self, rows: Sequence[tuple[WhisperTargetSession, int, Sequence[int]]]) -> list[list[int]]:
        """Each session's chosen tokens after its root and candidates (its own mode), all sessions in one call."""
        appended = [[int(root), *(int(c) for c in candidates)] for _, root, candidates in rows]
        logits = self.append({session.state: tokens for (session, _, _), tokens in zip(rows, appended)})
        return [session.chosen(tokens, logits[session.state]) for (session, _, _), tokens in zip(rows, appended)]

    def append(self, rows: dict[_Row, list[int]]) -> dict[_Row, np.ndarray]:
        """Append each row's tokens in one call; each row's logits [K, vocab]."""
        with self.lock:
            width = max(len(tokens) for tokens in rows.values())
            if any(row.length + width > self._model.max_length for row in rows):
                # near the end of the context the padding would run past it: such a call goes row by row
                return {row: self._call({row: tokens}, len(tokens))[row] for row, tokens in rows.items()}
            return self._call(rows, width)

    def _call(self, rows: dict[_Row, list[int]], width: int) -> dict[_Row, np.ndarray]:
        n = len(self._rows)
        for row, tokens in rows.items():
            if row.length + len(tokens) > self._model.max_length:
                raise ValueError(f"decoder context is {self._model.max_length} positions; "
                                 f"{row.length} + {len(tokens)} exceeds it")
        if n == 1:  # alone: the single-window graph, on the row's cache and audio in place
            ((row, tokens),) = rows.items()
            return {row: self._alone(row, tokens)}
        ids = np.full((n, width), self._model.eot, np.int64)
        lengths = np.zeros(n, np.int64)  # a row not in the call sees nothing of its cache
        for row, tokens in rows.items():
            ids[row.row, : len(tokens)] = tokens
            lengths[row.row] = row.length
        logits, new_kv = self._session.run(None, {"tokens": ids, "cache": self._cache[: int(lengths.max())],
                                                  "lengths": lengths,
                                                  **{name: column[:n] for name, column in zip(self._names, self._audio)}})
        out = {}
        for row, tokens in rows.items():
            start, k = row.length, len(tokens)
            self._cache[start : start + k, row.row] = new_kv[row.row, :k]
            row.length = start + k
            out[row] = logits[row.row, :k]
        return out

    def _alone(self, row: _Row, tokens: list[int]) -> np.ndarray:
        start, k = row.length, len(tokens)
        single = self._model.executor.session(self._model.decoder_file, row.threads or self._threads)
        logits, new_kv = single.run(None, {"tokens": np.asarray([tokens], np.int64),
                                           "past": self._cache[:start, 0],
                                           **{name: column[0] for name, column in zip(self._names, self._audio)}})
        self._cache[start : start + k, 0] = new_kv
        row.length = start + k
        return logits[0]
