"""A Whisper session's hypotheses for beam search (``capabilities.BeamRows``): one row per hypothesis.

Every row starts from the session's prompt cache. On ONNX Runtime with the windows graph
(``decoder.windows.onnx``, see ``window_group``) all rows append in one call: its cache is
position-major, ``[positions, rows, ...]``, so a hypothesis that takes another's prefix is a copy
along the row axis, and all rows read the request's one audio K/V. Without that graph (MNN,
a drafter's folder) each row is a decoder state of its own and appends in a call of its own: a
step of whisper-base with 5 rows took 23 ms in one call against 13 ms for each row alone on 2 cores.
The int8 target's folder has a graph for beams alone (``decoder.beams.onnx``: its layers in int8 too, as
CTranslate2 quantizes them; a step 27% cheaper). Its window groups and verification keep the layers in fp32,
since a batched call must equal one-token steps there; beams have no such pair (as2d's beams are target-only's),
so long as each call scores one position a row: rows on that graph refuse drafted tokens.
Each row's logits get the request's masks (``masks.ScoreMasks``) for that row's response, as the session's own
verification applies them.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from .graph_io import BEAMS_FILE, WINDOWS_FILE, audio_feed


class _Rows:
    """What both layouts share: each row's response tokens, and the masks on its logits."""

    def __init__(self, session, width: int):
        if width < 1:
            raise ValueError(f"beam rows need a width of at least 1, got {width}")
        if not hasattr(session.state, "cache"):
            raise ValueError("beam rows start from a session prepared alone, not in a window group")
        self.width = width
        self._model, self._masks, self._first = session.model, session.masks, session.first_row
        self._prompt = len(session.prompt)
        self._responses: list[list[int]] = [[] for _ in range(width)]

    def first_logits(self) -> np.ndarray:
        return self._first.copy()

    def advance(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        if len(rows) != self.width:
            raise ValueError(f"advance takes one entry per row ({self.width}), got {len(rows)}")
        for parent, kept, _ in rows:
            if not (0 <= parent < self.width and 0 <= kept <= len(self._responses[parent])):
                raise ValueError(f"row {parent} holds {len(self._responses[parent])} response tokens, "
                                 f"not {kept}" if 0 <= parent < self.width else f"no row {parent}")
        histories = [self._responses[parent][:kept] for parent, kept, _ in rows]
        appended = [[int(t) for t in tokens] for _, _, tokens in rows]
        self._reorder([parent for parent, _, _ in rows], max(kept for _, kept, _ in rows))
        logits = self._append([self._prompt + len(h) for h in histories], appended)
        out = []
        for i, (history, tokens) in enumerate(zip(histories, appended)):
            self._responses[i] = history + tokens
            out.append(self._masks.rows(np.array(logits[i][: len(tokens)], np.float32), history, tokens))
        return out

    def _reorder(self, parents: list[int], kept: int) -> None:
        """Each row's cache from its parent's first ``kept`` response positions (the prompt's are every row's own
        already: no row writes there, so a long prompt of previous text costs no copying a step)."""
        moved = [i for i, parent in enumerate(parents) if parent != i]
        if moved and kept:
            self._copy_rows(moved, [parents[i] for i in moved], slice(self._prompt, self._prompt + kept))

    def _copy_rows(self, rows: list[int], parents: list[int], positions: slice) -> None:
        """Row ``rows[j]``'s cache at ``positions`` from row ``parents[j]``'s, every source read before any row is
        written (rows may swap)."""
        raise NotImplementedError

    def _append(self, starts: list[int], appended: list[list[int]]) -> list[np.ndarray]:
        """Each row's tokens after its first ``starts[i]`` positions; each row's raw logits."""
        raise NotImplementedError


class WindowsRows(_Rows):
    """All rows in the windows graph's one call: the folder's beams graph (``BEAMS_FILE``) where it has one."""

    def __init__(self, session, width: int, as_verified: bool = False):
        super().__init__(session, width)
        model, alone = self._model, session.state
        self.graph_file = BEAMS_FILE if (model.dir / BEAMS_FILE).is_file() and not as_verified else WINDOWS_FILE
        self._graph = model.executor.session(self.graph_file, alone.threads)
        # one window's audio K/V for every row: the graph attends with all rows' queries in one block and reads
        # each head's K/V once a step (a sixth less time a step for 5 rows than reading it once a row, and 36 MB
        # a row not copied; the conversion checks it against the single-window decoder)
        self._audio = {name: block[None] for name, block in audio_feed(alone.audio).items()}
        self._cache = np.empty((model.max_length, width, *alone.cache.shape[1:]), np.float32)
        self._cache[: self._prompt] = alone.cache[: self._prompt, None]

    def advance(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        if self.graph_file == BEAMS_FILE and any(len(tokens) > 1 for _, _, tokens in rows):
            raise ValueError(f"{BEAMS_FILE} scores one position a row a call: drafted tokens would be scored by "
                             "other arithmetic than beams without them (its layers are int8; ``convert.quantize``)")
        return super().advance(rows)

    def _copy_rows(self, rows: list[int], parents: list[int], positions: slice) -> None:
        self._cache[positions, rows] = self._cache[positions, parents]  # the right side is gathered first

    def _append(self, starts: list[int], appended: list[list[int]]) -> list[np.ndarray]:
        width = max(len(tokens) for tokens in appended)
        if width == 0:
            return [np.empty((0, self._model.n_vocab), np.float32) for _ in appended]
        if max(starts) + width > self._model.max_length:
            raise ValueError(f"decoder context is {self._model.max_length} positions; "
                             f"{max(starts)} + {width} exceeds it")
        ids = np.full((self.width, width), self._model.eot, np.int64)
        for i, tokens in enumerate(appended):
            ids[i, : len(tokens)] = tokens
        lengths = np.asarray(starts, np.int64)
        logits, new_kv = self._graph.run(None, {"tokens": ids, "cache": self._cache[: max(starts)],
                                                "lengths": lengths, **self._audio})
        for i, tokens in enumerate(appended):
            self._cache[starts[i] : starts[i] + len(tokens), i] = new_kv[i, : len(tokens)]
        return list(logits)

    def close(self) -> None:
        self._cache = np.zeros((0,), np.float32)
        self._audio = {}


class SeparateRows(_Rows):
    """Each row a decoder state of its own on the single-window graph, sharing the request's audio K/V."""

    def __init__(self, session, width: int):
        super().__init__(session, width)
        alone = session.state
        self._states = [copy.copy(alone) for _ in range(width)]  # the audio input as the executor holds it, shared
        for state in self._states:
            state.cache, state.logits = alone.cache.copy(), alone.logits.copy()
            state.bind(alone.threads)

    def _copy_rows(self, rows: list[int], parents: list[int], positions: slice) -> None:
        taken = {parent: self._states[parent].cache[positions].copy() for parent in set(parents)}
        for row, parent in zip(rows, parents):
            self._states[row].cache[positions] = taken[parent]

    def _append(self, starts: list[int], appended: list[list[int]]) -> list[np.ndarray]:
        out = []
        for state, start, tokens in zip(self._states, starts, appended):
            state.length = start
            out.append(state.append(tokens).copy() if tokens else np.empty((0, self._model.n_vocab), np.float32))
        return out

    def close(self) -> None:
        for state in self._states:
            state.close()


def beam_rows(session, width: int, as_verified: bool = False) -> _Rows:
    """The faster layout this session's model offers: the windows graph's one call where it is installed (the
    beams graph's, unless the rows must score as the session verifies)."""
    model = session.model
    if model.backend == "onnxruntime" and (model.dir / WINDOWS_FILE).is_file():
        return WindowsRows(session, width, as_verified)
    return SeparateRows(session, width)
