"""One request's edits of the target's logits before each choice, as CTranslate2 makes them for faster-whisper.

In CTranslate2's order: the repetition penalty on the scores of the tokens decoded so far (the forced prefix
included), the tokens that would repeat an n-gram banned, the suppressed tokens, the blank and the end token at
the first free position (``suppress_blank``), and in timestamp mode Whisper's timestamp rules
(``as2d_core.decode.timestamps``), whose probability check sees all of the above. After a forced prefix the
rules start afresh, without the first-timestamp rule, as CTranslate2 starts them where the prefix ends.

Every edit reads only the tokens before the position it scores, so a verification of K positions edits each row
with the history up to it, as K single steps would: the tokens stay the target's own in the request's mode.
"""
from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from as2d_core.contracts import Request

_TASK_AND_SPECIAL = ("transcribe", "translate", "sot", "sot_prev", "sot_lm", "no_speech")


def suppressed_tokens(model, asked: Sequence[int]) -> np.ndarray:
    """The ids never chosen, as faster-whisper gives them to CTranslate2: the ids asked, -1 standing for the
    model's non-speech tokens, and always the task and special tokens."""
    if tuple(asked) == (-1,):
        return model.suppress  # the folder's list: this set, made at conversion
    ids = {int(t) for t in asked if t >= 0}
    if -1 in asked:
        ids |= set(model.meta["non_speech_tokens"])
    outside = sorted(t for t in ids if t >= model.n_vocab)
    if outside:
        raise ValueError(f"suppress_tokens {outside} are not tokens of {model.meta['name']} ({model.n_vocab} ids)")
    ids |= {model.special[k] for k in _TASK_AND_SPECIAL if model.special.get(k) is not None}
    return np.asarray(sorted(ids), np.int64)


class ScoreMasks:
    """The edits for one request (``forced``: the tokens its response is made to start with)."""

    def __init__(self, model, request: Request, forced: Sequence[int] = ()):
        rules = request.rules
        self.suppress = suppressed_tokens(model, rules.suppress_tokens)
        self.begin = model.suppress_blank if rules.suppress_blank else np.zeros(0, np.int64)
        self.no_timestamps = model.no_timestamps
        self.timestamps = None
        if request.timestamps != "none":
            self.timestamps = attrs.evolve(model.timestamp_rules,
                                           max_initial=round(rules.max_initial_timestamp / model.time_precision_s))
        self.forced = [int(t) for t in forced]
        self.penalty, self.ngram = rules.repetition_penalty, rules.no_repeat_ngram_size
        self._reads_history = rules.repetition_penalty != 1 or rules.no_repeat_ngram_size > 0

    def first(self, row: np.ndarray) -> np.ndarray:
        """Edit the logits of the first free position (after the prompt and any forced prefix), in place."""
        if self._reads_history:
            self._history_edits(row, self.forced)
        row[self.suppress] = -np.inf
        row[self.begin] = -np.inf
        if self.timestamps is not None:
            if self.forced:  # CTranslate2's rules begin after the prefix, with no first-timestamp rule
                row[self.no_timestamps] = -np.inf
            else:
                self.timestamps.apply(row, [])
        return row

    def rows(self, rows: np.ndarray, response: Sequence[int], appended: Sequence[int]) -> np.ndarray:
        """Edit ``rows[j]``, the logits after ``response`` plus ``appended[: j + 1]``, in place."""
        if self._reads_history:
            history = [*self.forced, *response]
            for j, token in enumerate(appended):
                history.append(int(token))
                self._history_edits(rows[j], history)
        rows[..., self.suppress] = -np.inf
        if self.timestamps is not None:
            self.timestamps.apply_rows(rows, response, appended)
        return rows

    def _history_edits(self, row: np.ndarray, history: Sequence[int]) -> None:
        if self.penalty != 1 and history:
            seen = np.unique(np.asarray(history, np.int64))
            scores = row[seen]
            row[seen] = np.where(scores < 0, scores * np.float32(self.penalty), scores / np.float32(self.penalty))
        n = self.ngram
        if n and len(history) >= n:
            tail = list(history[len(history) - n + 1:])
            banned = [history[start + n - 1] for start in range(len(history) - n + 1)
                      if list(history[start : start + n - 1]) == tail]
            row[banned] = -np.inf
