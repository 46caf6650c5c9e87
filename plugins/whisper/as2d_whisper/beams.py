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
import threading
from collections.abc import Sequence

import numpy as np

from .graph_io import BEAMS_FILE, OWN, PROMPT, WINDOWS_FILE, audio_feed, kv_feed, windows_graph_room


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
        # zeros, not np.empty: a row shorter than the call's longest attends to the positions past its own with
        # weight 0, and 0 times a NaN left in reused memory is NaN (its logits were NaN now and then, under load)
        self._cache = np.zeros((self._model.max_length, width, *alone.cache.shape[1:]), np.float32)
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


class WaveRows(_Rows):
    """One window's rows in a beam wave (``WhisperBeamWave``): a block of the wave's cache, its audio the wave's
    for this window; each step staged and handed to ``gather``, which returns once the wave's call made it."""

    def __init__(self, session, width: int, wave: "WhisperBeamWave", gather):
        super().__init__(session, width)
        self._wave, self._gather = wave, gather
        self.block = wave.join(self, session.state)
        session.state.close()  # its audio and prompt now live in the wave (as ``window_group`` moves them): 47 MB

    def _copy_rows(self, rows: list[int], parents: list[int], kept: int) -> None:
        self._wave.copy_rows(self, rows, parents, slice(self._prompt, self._prompt + kept))

    def _append(self, starts: list[int], appended: list[list[int]]) -> list[np.ndarray]:
        if not any(appended):
            return [np.empty((0, self._model.n_vocab), np.float32) for _ in appended]
        if max(starts) + max(len(tokens) for tokens in appended) > self._model.max_length:
            raise ValueError(f"decoder context is {self._model.max_length} positions; a row of {max(starts)} "
                             "positions cannot take more")
        return self._gather((self, starts, appended))

    def close(self) -> None:
        self._wave.leave(self)


class WhisperBeamWave:
    """Up to ``size`` windows' beam rows, ``width`` each, in one call of the windows graph a step
    (``capabilities.BeamWave``). The rows are grouped by window, so the graph reads each window's audio once
    for its rows (``torch_model.Attention.attend_audio``); the cache is position-major over the live windows'
    rows, laid out again in place when a window joins or leaves (a fresh array a time cost a second of page
    faults on the 330 s recording, and a second buffer 150 MB). A row scores as ``WindowsRows`` scores it, on
    the same graph; as in the greedy windows group (``window_group``), reductions whose length follows the
    call's widest row and longest cache may round differently in the last bits: waves of other sizes give the
    same tokens unless a near-tie turns on those bits (the tests compare the tokens on real speech)."""

    def __init__(self, model, size: int, width: int, threads: int, graph_file: str = WINDOWS_FILE):
        if size < 1 or width < 1:
            raise ValueError(f"a beam wave needs at least one window and one row, got {size} and {width}")
        self._model, self.size, self.width = model, size, width
        self._graph, self._names, self._row_shape, self._audio = windows_graph_room(model, size, threads, graph_file)
        self._row_size = int(np.prod(self._row_shape))
        self._buffer = np.zeros(model.max_length * size * width * self._row_size, np.float32)
        self._cache = self._view(0)
        self._members: list[WaveRows] = []
        self._lengths: dict[int, int] = {}  # positions each member's rows hold at most, by id
        self._lock = threading.Lock()

    def rows(self, session, width: int, gather) -> WaveRows:
        if width != self.width:
            raise ValueError(f"this beam wave holds {self.width} rows a window, not {width}")
        return WaveRows(session, width, self, gather)

    def join(self, rows: WaveRows, alone) -> int:
        """A window's block, its rows holding its prompt (``alone``: its session's own decoder state)."""
        with self._lock:
            if len(self._members) == self.size:
                raise RuntimeError(f"all {self.size} windows of the beam wave are taken")
            block = len(self._members)
            for column, audio in zip(self._audio, audio_feed(alone.audio).values()):
                column[block] = audio
            self._lay_out([self._columns(b) for b in range(block)], joining=True)
            self._cache[: alone.length, block * self.width :] = alone.cache[: alone.length, None]
            self._members.append(rows)
            self._lengths[id(rows)] = alone.length
            return block

    def leave(self, rows: WaveRows) -> None:
        """``rows``' window is done: the last window's block takes its place."""
        with self._lock:
            if rows not in self._members:
                return
            del self._lengths[id(rows)]
            last = self._members.pop()
            blocks = [self._columns(b) for b in range(len(self._members))]
            if last is not rows:
                for column in self._audio:
                    column[rows.block] = column[last.block]
                blocks[rows.block] = self._columns(last.block)
                self._members[rows.block], last.block = last, rows.block
            self._lay_out(blocks)

    def copy_rows(self, rows: WaveRows, moved: list[int], parents: list[int], positions: slice) -> None:
        with self._lock:
            block = self._columns(rows.block)
            self._cache[positions, [block[r] for r in moved]] = self._cache[positions, [block[p] for p in parents]]

    def step(self, asks) -> list[list[np.ndarray]]:
        """One call of the windows graph for every window's staged step ``(rows, starts, appended)``."""
        with self._lock:
            n = len(self._members) * self.width
            width = max(len(tokens) for _, (_, _, appended) in asks for tokens in appended)
            ids = np.full((n, width), self._model.eot, np.int64)
            lengths = np.zeros(n, np.int64)  # a row not in the call sees nothing of its cache
            for _, (rows, starts, appended) in asks:
                for row, start, tokens in zip(self._columns(rows.block), starts, appended):
                    ids[row, : len(tokens)] = tokens
                    lengths[row] = start
            logits, new_kv = self._graph.run(None, {
                "tokens": ids, "cache": self._cache[: int(lengths.max())], "lengths": lengths,
                **{name: column[: len(self._members)] for name, column in zip(self._names, self._audio)}})
            answers = []
            for _, (rows, starts, appended) in asks:
                for row, start, tokens in zip(self._columns(rows.block), starts, appended):
                    self._cache[start : start + len(tokens), row] = new_kv[row, : len(tokens)]
                    self._lengths[id(rows)] = max(self._lengths[id(rows)], start + len(tokens))
                answers.append([logits[row] for row in self._columns(rows.block)])
            return answers

    def _columns(self, block: int) -> range:
        """The cache's rows of the window in ``block``."""
        return range(block * self.width, (block + 1) * self.width)

    def _view(self, rows: int) -> np.ndarray:
        """The buffer's start as a contiguous position-major cache of ``rows`` rows."""
        return self._buffer[: self._model.max_length * rows * self._row_size].reshape(
            self._model.max_length, rows, *self._row_shape)

    def _lay_out(self, blocks: list[range], joining: bool = False) -> None:
        """The cache laid out again in place for the old cache's ``blocks`` of rows, then a ``joining`` window's:
        position by position, from the last when it grows and from the first when it shrinks, so no position is
        written before it is read."""
        used = max(self._lengths.values(), default=0)
        old, new = self._cache.shape[1], (len(blocks) + joining) * self.width
        columns = np.concatenate([np.arange(b.start, b.stop) for b in blocks]) if blocks else np.empty(0, np.int64)
        size = self._row_size
        for p in (range(used - 1, -1, -1) if new > old else range(used)):
            kept = self._buffer[p * old * size : (p + 1) * old * size].reshape(old, size)[columns]  # a copy
            self._buffer[p * new * size : p * new * size + kept.size] = kept.ravel()
        self._cache = self._view(new)


def beam_rows(session, width: int, as_verified: bool = False) -> _Rows:
    """The fastest layout this session's model offers: the beams graph's one call, or the windows graph's where the
    rows must score as the session verifies or the folder has no beams graph; else a call a row."""
    model = session.model
    if model.backend == "onnxruntime" and (model.dir / BEAMS_FILE).is_file() and not as_verified:
        return SharedPromptRows(session, width)
    if model.backend == "onnxruntime" and (model.dir / WINDOWS_FILE).is_file():
        return WindowsRows(session, width)
    return SeparateRows(session, width)
