"""A Whisper session's hypotheses for beam search (``capabilities.BeamRows``): one row per hypothesis.

Every row starts from the session's prompt cache. On ONNX Runtime a target's folder has a graph for beams alone
(``decoder.beams.onnx``, ``torch_model.decode_beams``), which appends all rows in one call: every row reads the
prompt's K/V (the previous text, up to half the context) from one block bound once a request, as it reads the
audio's, and only the rows' own responses are kept per row, position-major, so a hypothesis that takes another's
prefix is a copy along the row axis and a step copies no cache into the graph. A 5-beam step after a prompt of
120 positions costs 1.3-1.4x less than on the windows graph, which holds the prompt once per row (BENCHMARKS.md
section 36). Its arithmetic differs from the windows graph's in the last bits (the prompt's and the responses'
keys are scored in products of their own), so rows on it refuse drafted tokens: as2d's beams are target-only's,
both on this graph. Rows that must score as the session verifies (``as_verified``: sampled rows side by side,
``best_of``) run on the windows graph (``decoder.windows.onnx``, see ``window_group``), each row a copy of the
prompt. Without either graph (MNN, a drafter's folder) each row is a decoder state of its own and appends in a
call of its own: a step of whisper-base with 5 rows took 23 ms in one call against 13 ms for each row alone.
The int8 target's beams graph has its layers in int8 too, as CTranslate2 quantizes them (a step 27% cheaper);
its window groups and verification keep the layers in fp32, since a batched call must equal one-token steps there.
Each row's logits get the request's masks (``masks.ScoreMasks``) for that row's response, as the session's own
verification applies them.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np

from .graph_io import BEAMS_FILE, OWN, PROMPT, WINDOWS_FILE, audio_feed, kv_feed


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
            self._copy_rows(moved, [parents[i] for i in moved], kept)

    def _copy_rows(self, rows: list[int], parents: list[int], kept: int) -> None:
        """Row ``rows[j]``'s first ``kept`` response positions from row ``parents[j]``'s, every source read before
        any row is written (rows may swap)."""
        raise NotImplementedError

    def _append(self, starts: list[int], appended: list[list[int]]) -> list[np.ndarray]:
        """Each row's tokens after its first ``starts[i]`` positions; each row's raw logits."""
        raise NotImplementedError


class _OneCall(_Rows):
    """All rows in one call of a graph over rows (``graph_file``), each row's cache position-major."""

    graph_file = WINDOWS_FILE

    def __init__(self, session, width: int):
        super().__init__(session, width)
        self._graph = self._model.executor.session(self.graph_file, session.state.threads)
        # one window's audio K/V for every row: the graph attends with all rows' queries in one block and reads
        # each head's K/V once a step (a sixth less time a step for 5 rows than reading it once a row, and 36 MB
        # a row not copied; the conversion checks it against the single-window decoder)
        self._audio = {name: block[None] for name, block in audio_feed(session.state.audio).items()}

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
        logits, new_kv = self._graph.run(None, {"tokens": ids, **self._audio, **self._cache_feed(starts)})
        for i, tokens in enumerate(appended):
            self._store(i, starts[i], new_kv[i, : len(tokens)])
        return list(logits)

    def _cache_feed(self, starts: list[int]) -> dict[str, np.ndarray]:
        """The graph's cache inputs for rows holding ``starts[i]`` positions each."""
        raise NotImplementedError

    def _store(self, row: int, start: int, new_kv: np.ndarray) -> None:
        """Row ``row``'s new K/V [K, layers, 2, heads, head_dim] at positions ``start`` on."""
        raise NotImplementedError


class WindowsRows(_OneCall):
    """All rows in the windows graph's one call, each holding the prompt's K/V as well: rows that score as the
    session verifies (a batched call on this graph equals one-token steps, ``window_group``)."""

    def __init__(self, session, width: int):
        super().__init__(session, width)
        alone = session.state
        self._cache = np.empty((self._model.max_length, width, *alone.cache.shape[1:]), np.float32)
        self._cache[: self._prompt] = alone.cache[: self._prompt, None]

    def _copy_rows(self, rows: list[int], parents: list[int], kept: int) -> None:
        positions = slice(self._prompt, self._prompt + kept)
        self._cache[positions, rows] = self._cache[positions, parents]  # the right side is gathered first

    def _cache_feed(self, starts: list[int]) -> dict[str, np.ndarray]:
        return {"cache": self._cache[: max(starts)], "lengths": np.asarray(starts, np.int64)}

    def _store(self, row: int, start: int, new_kv: np.ndarray) -> None:
        self._cache[start : start + len(new_kv), row] = new_kv

    def close(self) -> None:
        self._cache = np.zeros((0,), np.float32)
        self._audio = {}


class SharedPromptRows(_OneCall):
    """All rows in the beams graph's one call: the prompt's K/V one block every row reads, bound once; each row's
    own response position-major per layer and kind, ``[layers, 2, positions, rows, heads, head_dim]``, so each
    input is a contiguous block of it and a step copies none."""

    graph_file = BEAMS_FILE

    def __init__(self, session, width: int):
        super().__init__(session, width)
        alone = session.state
        prompt = alone.cache[: self._prompt]  # [positions, layers, 2, heads, head_dim]
        self._shared = kv_feed(np.ascontiguousarray(prompt.transpose(1, 2, 3, 0, 4))[:, :, None], PROMPT)
        layers, kinds, heads, head_dim = alone.cache.shape[1:]
        # one position more than a response can hold: a first step feeds one masked position (no empty inputs)
        self._own = np.zeros((layers, kinds, self._model.max_length - self._prompt + 1, width, heads, head_dim),
                             np.float32)

    def advance(self, rows: Sequence[tuple[int, int, Sequence[int]]]) -> list[np.ndarray]:
        if any(len(tokens) > 1 for _, _, tokens in rows):
            raise ValueError(f"{BEAMS_FILE} scores one position a row a call: drafted tokens would be scored by "
                             "other arithmetic than one-token steps (its prompt and responses are scored apart; "
                             "the int8 target's layers are int8, ``convert.quantize``)")
        return super().advance(rows)

    def _copy_rows(self, rows: list[int], parents: list[int], kept: int) -> None:
        self._own[:, :, :kept, rows] = self._own[:, :, :kept, parents]  # the right side is gathered first

    def _cache_feed(self, starts: list[int]) -> dict[str, np.ndarray]:
        lengths = np.asarray(starts, np.int64) - self._prompt
        return {"lengths": lengths, **self._shared, **kv_feed(self._own[:, :, : max(1, int(lengths.max()))], OWN)}

    def _store(self, row: int, start: int, new_kv: np.ndarray) -> None:
        start -= self._prompt
        self._own[:, :, start : start + len(new_kv), row] = new_kv.transpose(1, 2, 0, 3, 4)

    def close(self) -> None:
        self._own = np.zeros((0,), np.float32)
        self._shared, self._audio = {}, {}


class SeparateRows(_Rows):
    """Each row a decoder state of its own on the single-window graph, sharing the request's audio K/V."""

    def __init__(self, session, width: int):
        super().__init__(session, width)
        alone = session.state
        self._states = [copy.copy(alone) for _ in range(width)]  # the audio input as the executor holds it, shared
        for state in self._states:
            state.cache, state.logits = alone.cache.copy(), alone.logits.copy()
            state.bind(alone.threads)

    def _copy_rows(self, rows: list[int], parents: list[int], kept: int) -> None:
        positions = slice(self._prompt, self._prompt + kept)
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
    """The fastest layout this session's model offers: the beams graph's one call, or the windows graph's where the
    rows must score as the session verifies or the folder has no beams graph; else a call a row."""
    model = session.model
    if model.backend == "onnxruntime" and (model.dir / BEAMS_FILE).is_file() and not as_verified:
        return SharedPromptRows(session, width)
    if model.backend == "onnxruntime" and (model.dir / WINDOWS_FILE).is_file():
        return WindowsRows(session, width)
    return SeparateRows(session, width)
