"""Word timestamps on the Whisper target, by openai-whisper's method (which faster-whisper runs through
CTranslate2's ``align``), from the committed tokens after decoding.

One batched pass of the aligner graph (``aligner.onnx``, exported at install by ``convert.aligner``)
over ``<|startoftranscript|> [language task] <|notimestamps|> text <|endoftext|>`` on the request's
encoder output gives the raw cross-attention scores of the model's alignment heads and the logits.
The scores of the frames that hold audio are softmax-normalized per head and token, standardized over
the tokens at each frame, median-filtered over 7 frames and averaged over the heads; dynamic time
warping through the negative of that matrix assigns each token the frame (20 ms) where its row starts.
Tokens are grouped into words (at leading spaces and punctuation; character by character in languages
written without spaces), a word's probability is the mean of its tokens' probabilities in the same
pass, and Whisper's corrections follow: over-long words at sentence ends and after a pause are cut,
punctuation joins its neighbour, and each segment's start and end move to its first and last word's unless
such a word runs far past the segment's timestamp (faster-whisper's ``add_word_timestamps``, in the times of
the audio the request is cut from, so the long form's seek by the last word's end is faster-whisper's).

The words depend on the committed tokens and the audio only, so as2d's words are target-only's. The
session keeps the request's encoder output for the pass (``keep_audio``), so the words cost one decoder
pass over the response and numpy, the same for every method.
"""
from __future__ import annotations

import json
import string
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np

from as2d_core.capabilities import TimedWords, Word
from as2d_core.contracts import WORD_PUNCTUATION, Request
from as2d_core.setup.paths import ModelFilesMissing
from as2d_core.decode.timestamps import split_segments

ALIGNER_FILE = "aligner.onnx"
FRAMES_PER_SECOND = 50  # the encoder's output: one frame per 20 ms
MEDIAN_WIDTH = 7
SENTENCE_ENDS = ".。!！?？"
UNSPACED = frozenset({"zh", "ja", "th", "lo", "my", "yue"})  # words are characters (openai-whisper's list)
KEPT_AUDIO = 2  # requests whose encoder output waits for their words (a check decodes each request twice)
# A sorting network for 7 values (16 compare-exchanges); its middle output is the median.
_SORT7 = ((0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5), (3, 4), (1, 2), (4, 6), (2, 3), (4, 5),
          (1, 2), (3, 4), (5, 6))


# --------------------------------------------------------------------------- the alignment matrix


def median_filter(x: np.ndarray) -> np.ndarray:
    """Median of 7 neighbours along the last axis, the edges mirrored (as openai-whisper and CTranslate2
    pad): a sorting network on shifted views, several times faster than ``np.median`` of windows."""
    half = MEDIAN_WIDTH // 2
    n = x.shape[-1]
    if n <= half:  # too few frames to mirror: left as it is, as CTranslate2 does
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode="reflect")
    wires = [padded[..., k : k + n] for k in range(MEDIAN_WIDTH)]
    for a, b in _SORT7:
        low = np.minimum(wires[a], wires[b])
        wires[b] = np.maximum(wires[a], wires[b])
        wires[a] = low
    return wires[half]


def alignment_matrix(scores: np.ndarray, n_frames: int) -> np.ndarray:
    """[tokens, frames] from the heads' raw scores [heads, tokens, 1500] over the first ``n_frames`` mel frames."""
    x = scores[:, :, : max(1, n_frames // 2)].astype(np.float32)  # the encoder halves the frame rate
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    x /= x.sum(axis=-1, keepdims=True)
    x = (x - x.mean(axis=-2, keepdims=True)) / x.std(axis=-2, keepdims=True)
    return median_filter(x).mean(axis=0)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotone path through ``cost`` [rows, columns] from corner to corner: (rows, columns).

    Each cell extends its diagonal, upper or left neighbour, whichever is strictly cheapest, the left one
    on ties (openai-whisper's rule). Cells on one anti-diagonal depend only on the two before it, so each
    anti-diagonal is one vectorized step: ``total[d, i]`` is the cost of cell (i, d - i), one-based.
    """
    n, m = cost.shape
    skewed = np.zeros((n + m + 1, n + 1), np.float32)  # skewed[d, i] = cost[i - 1, d - i - 1]
    rows, cols = np.indices((n, m))
    skewed[rows + cols + 2, rows + 1] = cost
    total = np.full((n + m + 1, n + 1), np.inf, np.float32)
    step = np.full((n + m + 1, n + 1), 2, np.int8)
    total[0, 0] = 0.0
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1)
        diagonal, up, left = total[d - 2, lo - 1 : hi], total[d - 1, lo - 1 : hi], total[d - 1, lo : hi + 1]
        take_diagonal = (diagonal < up) & (diagonal < left)
        take_up = (up < diagonal) & (up < left)
        total[d, lo : hi + 1] = skewed[d, lo : hi + 1] + np.where(take_diagonal, diagonal, np.where(take_up, up, left))
        step[d, lo : hi + 1] = 2 - 2 * take_diagonal - take_up
    path = []
    i, j = n, m
    while i > 0 or j > 0:  # along the edges to the corner, as openai-whisper's trace (row 0: left, column 0: up)
        path.append((i - 1, j - 1))
        s = 1 if j == 0 else 2 if i == 0 else step[i + j, i]
        i, j = (i - 1, j - 1) if s == 0 else (i - 1, j) if s == 1 else (i, j - 1)
    path.reverse()
    return np.array([p[0] for p in path]), np.array([p[1] for p in path])


def token_starts(matrix: np.ndarray) -> np.ndarray:
    """Seconds at which each row of ``matrix`` starts on the warping path through its negative."""
    rows, frames = dtw(-matrix)
    first = np.diff(rows, prepend=-1).astype(bool)
    return frames[first] / FRAMES_PER_SECOND


# --------------------------------------------------------------------------- words


@attrs.define
class _Timed:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def unicode_pieces(tokens: Sequence[int], decode: Callable[[Sequence[int]], str]) -> list[tuple[str, list[int]]]:
    """Runs of tokens that decode to whole characters (a character may span tokens of its UTF-8 bytes)."""
    full = decode(tokens)
    pieces: list[tuple[str, list[int]]] = []
    current: list[int] = []
    at = 0
    for token in tokens:
        current.append(int(token))
        text = decode(current)
        broken = text.find("\ufffd")
        if broken < 0 or full[at + broken : at + broken + 1] == "\ufffd":  # complete, or a real replacement char
            pieces.append((text, current))
            at += len(text)
            current = []
    return pieces


def split_words(tokens: Sequence[int], decode: Callable[[Sequence[int]], str],
                spaced: bool) -> list[tuple[str, list[int]]]:
    """Words of text tokens with their tokens: a new word at a leading space or punctuation (``spaced``),
    else one per character."""
    pieces = unicode_pieces(tokens, decode)
    if not spaced:
        return pieces
    words: list[tuple[str, list[int]]] = []
    for text, ids in pieces:
        if not words or text.startswith(" ") or text.strip() in string.punctuation:
            words.append((text, list(ids)))
        else:
            words[-1] = (words[-1][0] + text, words[-1][1] + ids)
    return words


def _cut_long_words(words: list[_Timed]) -> tuple[float, float]:
    """Whisper's guard at sentence ends: no word there lasts over twice the median word; returns (median, max)."""
    durations = np.array([w.end - w.start for w in words])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations))) if len(durations) else 0.0
    longest = 2 * median
    if len(durations):
        for i in range(1, len(words)):
            if words[i].end - words[i].start > longest:
                if words[i].word in SENTENCE_ENDS:
                    words[i].end = words[i].start + longest
                elif words[i - 1].word in SENTENCE_ENDS:
                    words[i].start = words[i].end - longest
    return median, longest


def merge_punctuation(words: list[_Timed], marks: tuple[str, str] = WORD_PUNCTUATION) -> None:
    """Join opening marks (``marks[0]``) to the next word and closing marks (``marks[1]``) to the previous one (the
    mark's entry is emptied)."""
    prepended, appended = marks
    following = len(words) - 1
    for i in range(len(words) - 2, -1, -1):
        mark = words[i]
        if mark.word.startswith(" ") and mark.word.strip() in prepended:
            words[following].word = mark.word + words[following].word
            words[following].tokens = mark.tokens + words[following].tokens
            mark.word, mark.tokens = "", []
        else:
            following = i
    previous = 0
    for j in range(1, len(words)):
        mark = words[j]
        if not words[previous].word.endswith(" ") and mark.word in appended:
            words[previous].word += mark.word
            words[previous].tokens = words[previous].tokens + mark.tokens
            mark.word, mark.tokens = "", []
        else:
            previous = j


def _fit_segment(words: list[_Timed], start: float, end: float, median: float, longest: float,
                 last_speech: float) -> tuple[float, float]:
    """Whisper's guards for one segment's words, in the times of the audio the request is cut from: the first
    word after a pause is cut to twice the median word; then the segment's start moves to its first word's,
    unless that word starts over 0.5 s before it (then the word is cut back), and its end to its last word's,
    unless that word ends over 0.5 s after it. Returns the segment's (start, end)."""
    first, last = words[0], words[-1]
    if first.end - last_speech > median * 4 and (
            first.end - first.start > longest or (len(words) > 1 and words[1].end - first.start > longest * 2)):
        if len(words) > 1 and words[1].end - words[1].start > longest:
            boundary = max(words[1].end / 2, words[1].end - longest)
            first.end = words[1].start = boundary
        first.start = max(0.0, first.end - longest)
    if start < first.end and start - 0.5 > first.start:
        first.start = max(0.0, min(first.end - median, start))
    else:
        start = first.start
    if end > last.start and end + 0.5 < last.end:
        last.end = max(last.start + median, end)
    else:
        end = last.end
    return start, end


# --------------------------------------------------------------------------- the aligner


def has_aligner(folder: Path) -> bool:
    """Whether an installed folder holds the aligner graph and its heads (model.json's ``alignment``)."""
    meta = folder / "model.json"
    return meta.is_file() and "alignment" in json.loads(meta.read_text()) and (folder / ALIGNER_FILE).is_file()


class WhisperAligner:
    """The aligner graph of one converted folder, on ONNX Runtime (whatever backend decodes)."""

    def __init__(self, folder: Path, device: str):
        from as2d_onnxruntime.sessions import OrtSessions

        if not has_aligner(folder):
            raise ModelFilesMissing(
                f"{folder} has no aligner graph ({ALIGNER_FILE}) for word timestamps: run "
                f"`as2d models install {folder.name}` (it adds the graph to the installed folder; "
                f"`--force` converts the whole model again)")
        self.heads = [tuple(h) for h in json.loads((folder / "model.json").read_text())["alignment"]["heads"]]
        self.sessions = OrtSessions(folder / ALIGNER_FILE, device)

    def token_timing(self, cross_kv: np.ndarray, n_frames: int, start: list[int], text: list[int], eot: int,
                     threads: int) -> tuple[np.ndarray, np.ndarray]:
        """(start second of each text token and of the end token, probability of each text token) in one pass."""
        ids = np.asarray([start + text + [eot]], dtype=np.int64)
        session = self.sessions.get(threads)[0]
        logits, scores = session.run(None, {"tokens": ids, "cross_kv": cross_kv})
        rows = logits[0, len(start) - 1 : len(start) - 1 + len(text), :eot].astype(np.float64)
        top = rows.max(axis=-1)
        log_norm = top + np.log(np.exp(rows - top[:, None]).sum(axis=-1))
        probabilities = np.exp(rows[np.arange(len(text)), text] - log_norm)
        matrix = alignment_matrix(scores, n_frames)[len(start) - 1 : -1]
        return token_starts(matrix), probabilities


def timed_words(text: list[int], starts: np.ndarray, probabilities: np.ndarray, decode, spaced: bool) -> list[_Timed]:
    """Words of the text tokens, each from its first token's start to the next word's (the end token's for
    the last), with the mean probability of its tokens."""
    pieces = split_words(text, decode, spaced)
    bounds = np.concatenate([[0], np.cumsum([len(ids) for _, ids in pieces])]).astype(int)
    return [_Timed(word, ids, float(starts[a]), float(starts[b]), float(np.mean(probabilities[a:b])))
            for (word, ids), a, b in zip(pieces, bounds[:-1], bounds[1:])]


@attrs.define
class _WordState:
    """One target's aligner (built at the first words asked) and the encodings kept for their words."""

    lock: threading.Lock = attrs.Factory(threading.Lock)
    kept: dict = attrs.Factory(dict)  # request id -> the encoder's output (cross K/V), oldest first
    aligner: WhisperAligner | None = None
    warm: set = attrs.Factory(set)  # thread counts whose session has run once


class WordTimestamps:
    """What the Whisper target adds for ``--word-timestamps`` (``capabilities.WordAligner``).

    The session hands over its request's encoder output (``keep_audio``) when the request asks for words,
    so ``align_words`` costs the aligner pass only; without it (words asked of a request decoded before)
    the encoder runs again.
    """

    model: "object"  # the loaded folder (``model_files.ModelFiles``)

    @property
    def _words(self) -> _WordState:
        return self.__dict__.setdefault("_word_state", _WordState())  # no __init__ of its own: made on first use

    def keep_audio(self, request: Request, cross_kv: np.ndarray) -> None:
        """Hold ``request``'s encoder output until its words are aligned (the oldest goes beyond ``KEPT_AUDIO``)."""
        state = self._words
        with state.lock:
            state.kept[request.request_id] = cross_kv
            while len(state.kept) > KEPT_AUDIO:
                state.kept.pop(next(iter(state.kept)))

    def prepare_words(self, threads: int) -> None:
        """The aligner graph's session for ``threads``, run once on silence so that its first real pass
        costs what every later one does (a clear error if the folder lacks the graph); then nothing."""
        model, aligner = self.model, self._aligner()
        if threads in self._words.warm:
            return
        dims = model.meta["dims"]
        cross = np.zeros((model.n_layers, 2, model.n_heads, dims["n_audio_ctx"], model.head_dim), np.float32)
        aligner.token_timing(cross, 2 * dims["n_audio_ctx"], [model.sot], [model.eot - 1], model.eot, threads)
        self._words.warm.add(threads)

    def align_words(self, request: Request, language: str, tokens: Sequence[int], threads: int,
                    last_speech_s: float = 0.0) -> TimedWords:
        """The words of ``tokens`` (a response to ``request`` in ``language``) and their segments' times, in
        seconds from the request's start; ``last_speech_s`` in the audio the request is cut from."""
        model = self.model
        text = [int(t) for t in tokens if int(t) < model.eot]
        bounds = self._segment_bounds(request, tokens)
        if not text:
            return TimedWords([], [(start, end) for start, end, _ in bounds])
        aligner = self._aligner()
        with self._words.lock:
            cross = self._words.kept.pop(request.request_id, None)
        if cross is None:
            cross = model.audio_kv(request, threads)
        plain = attrs.evolve(request, timestamps="none", prompt=None, previous_text=None, hotwords=None)
        start = model.decoder_prompt(plain, language)  # <|startoftranscript|> [language task] <|notimestamps|>
        aligned = request.audio.size if request.align_s is None else round(request.align_s * request.sample_rate)
        n_frames = min(aligned // 160, 2 * cross.shape[3])  # mel frames of audio (10 ms each)
        starts, probabilities = aligner.token_timing(cross, n_frames, start, text, model.eot, threads)
        words = timed_words(text, starts, probabilities, model.decode_text, language not in UNSPACED)
        median, longest = _cut_long_words(words)
        merge_punctuation(words, request.punctuations)
        return self._in_segments(request, bounds, words, median, longest, last_speech_s)

    def _segment_bounds(self, request: Request, tokens: Sequence[int]) -> list[tuple[float, float, int]]:
        """Each segment with text of the response: its start and end (seconds from the request's start) and how
        many text tokens it holds."""
        model = self.model
        if request.timestamps == "none":
            text = [t for t in tokens if t < model.eot]
            return [(0.0, request.duration_s, len(text))] if model.decode_text(text).strip() else []
        segments = split_segments(tokens, model.timestamp_begin, model.decode_text, request.duration_s,
                                  model.time_precision_s)
        return [(s.start_s, s.end_s, sum(1 for t in s.tokens if t < model.eot)) for s in segments]

    def _in_segments(self, request: Request, bounds: list[tuple[float, float, int]], words: list[_Timed],
                     median: float, longest: float, last_speech_s: float) -> TimedWords:
        """Words shared out to the segments by their tokens and fitted with them, as faster-whisper fits them: in
        the times of the audio the request is cut from (its ``offset``), rounded to 10 ms, the speech's end carried
        from segment to segment. Words count from the offset's whole mel frame (faster-whisper's seek), segments
        from the offset itself."""
        offset = request.offset / request.sample_rate
        seek_s = request.offset // 160 / 100
        out: list[Word] = []
        times: list[tuple[float, float]] = []
        index, last_speech = 0, last_speech_s
        for start, end, count in bounds:
            mine: list[_Timed] = []
            taken = 0
            while index < len(words) and taken < count:
                if words[index].word:
                    mine.append(words[index])
                taken += len(words[index].tokens)
                index += 1
            start, end = offset + start, offset + end
            for w in mine:
                w.start, w.end = round(seek_s + w.start, 2), round(seek_s + w.end, 2)
            if mine:
                start, end = _fit_segment(mine, start, end, median, longest, last_speech)
                last_speech = end
            times.append((start - offset, end - offset))
            out += [Word(w.word, w.start - offset, w.end - offset, w.probability) for w in mine]
        return TimedWords(out, times)

    def _aligner(self) -> WhisperAligner:
        state = self._words
        with state.lock:
            if state.aligner is None:
                model = self.model
                state.aligner = WhisperAligner(model.dir, model.device if model.backend == "onnxruntime" else "cpu")
            return state.aligner
