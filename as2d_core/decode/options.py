"""The decoding options: one frozen record, each user-facing field declared once with its default and bounds.

Decoding owns them (``run_request`` and the proposers read them); each field also carries its
configuration key and help line as metadata, which ``setup.options`` turns into the command-line
flags and the configuration schema, so ``run``, ``stream``, ``serve``, ``bench``, tuning and the
configuration files cannot drift apart.
"""
from __future__ import annotations

from typing import Any

import attrs

from as2d_core.contracts import TIMESTAMPS  # unset (None): by the output, segment for subtitles

MAX_BUDGET = 64
STARTS = ("arrival", "prepared")


def check_budget(value: int) -> int:
    if not 1 <= value <= MAX_BUDGET:
        raise ValueError(f"budget must be between 1 and {MAX_BUDGET} proposals per verification, got {value}")
    return value


def out_of_range(value, low: int | None, high: int | None) -> str | None:
    """Why ``value`` is outside ``low..high`` (None: it is inside); the words every check uses."""
    if (low is not None and value < low) or (high is not None and value > high):
        return f"{value} is out of range; allowed: " + (f"{low}..{high}" if high is not None else f"at least {low}")
    return None


def _in_range(instance, attribute, value):
    low, high = attribute.metadata["low"], attribute.metadata["high"]
    if out_of_range(value, low, high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{attribute.name} must be {bounds}, got {value}")


def _option(default, config: str, help: str, low: int | None = None, high: int | None = None,
            choices: tuple[str, ...] | None = None, kind: type | None = None):
    """A field that users set: ``config`` is its dotted key in a task configuration; ``low``/``high``
    bound a number, ``choices`` a word; ``kind`` is the value's type where the default (None) does not say it."""
    kind = kind or type(default)
    if choices:
        validator = attrs.validators.in_(choices)
    elif kind in (str, bool):
        validator = attrs.validators.instance_of(kind)
    else:
        validator = _in_range
    if default is None:
        validator = attrs.validators.optional(validator)
    return attrs.field(default=default, validator=validator, metadata={
        "config": config, "help": help, "choices": choices, "low": low, "high": high, "kind": kind})


@attrs.frozen
class DecodeOptions:
    budget: int = _option(7, "budget", "Proposals per verification (width <= budget+1).", 1, MAX_BUDGET)
    # the paper publishes every 8 drafter tokens; a drafter on 2 cores is slower than the target consumes
    publication_size: int = _option(2, "source.publication_size", "Drafter tokens per published batch.", 1)
    align_window: int = _option(8, "align_window", "How far the read cursor looks for the root after a rejection.", 0)
    target_threads: int = _option(2, "target.threads", "Target threads when it runs alone.", 1)
    shared_target_threads: int = _option(1, "target.shared_threads", "Target threads while the drafter runs.", 1)
    drafter_threads: int = _option(1, "source.threads", "Drafter threads.", 1)
    drafter_nice: int = _option(
        0, "source.nice",
        "Niceness added to the drafter's threads (Linux, Android) when it drafts the request's own language "
        "or a file's next window ahead; 0: the target's priority.", 0, 19)
    guess_nice: int = _option(
        19, "source.guess_nice",
        "The drafter's niceness on a single request that names no language, where it starts on its own "
        "language before the target has detected one: it drafts on the cycles the target leaves, so a guess "
        "the target rejects costs it little.", 0, 19)
    start: str = _option("arrival", "start",
                         "arrival: the drafter starts with the request, beside the target's audio encoding; "
                         "prepared: after both models are prepared (the paper's post-prefill set-up).",
                         choices=STARTS)
    # What the pipeline puts in each request (``request_fields``); the engine reads them off the request.
    timestamps: str | None = _option(
        None, "timestamps", "segment: the target decodes Whisper's timestamp tokens under Whisper's rules, and the "
        "output has one segment per timestamp pair (subtitles: one cue each); none: plain text. Unset: segment for "
        "srt and vtt, none otherwise.", choices=TIMESTAMPS, kind=str)
    prompt: str | None = _option(
        None, "prompt", "Whisper's previous-text prompt (initial_prompt) for the first window, or for every window "
        "with --condition-on-previous-text; over Whisper's limit of half the context less one token it is refused.",
        kind=str)
    hotwords: str | None = _option(
        None, "hotwords", "Words to favour, placed before the previous text of every window as faster-whisper does.",
        kind=str)
    condition_on_previous_text: bool = _option(
        False, "condition_on_previous_text", "Prompt each window of a file with the text before it (after --prompt), "
        "as Whisper's long-form transcription does; the drafter then drafts a window only once the one before it is "
        "done. Files only: bench windows and stream blocks are each decoded alone.")
    batch_windows: int = _option(
        1, "batch_windows", "Windows of a file decoded side by side, their verifications made in one call of a "
        "target that can (whisper-base and whisper-base-int8 on ONNX Runtime); each window's tokens are the ones it "
        "gets alone. 1: one window at a time. Files only, and not with --condition-on-previous-text (a window "
        "waits for the text before it) nor while text is streamed as it is committed.", 1, 16)
    word_timestamps: bool = _option(
        False, "word_timestamps", "Time every word (start, end, probability) by the target's cross-attention after "
        "decoding, as openai-whisper does: one pass over the committed tokens, so it costs every method the same "
        "(words_s in --json and in bench rows). The server gives words in verbose_json when a request names no "
        "timestamp_granularities.")
    drain_timeout_s: float = 2.0
    # as2d-no-bc (SpecASR's budget rule kept with decoupled drafting): candidates end at the first
    # published token whose confidence is below this (that token included); None keeps the fixed budget.
    confidence_stop: float | None = attrs.field(default=None)

    def request_fields(self) -> dict[str, Any]:
        """What these options put in a request on their own (the pipeline adds each window's previous text)."""
        return {"timestamps": self.timestamps or "none", "prompt": self.prompt, "hotwords": self.hotwords,
                "word_timestamps": self.word_timestamps}

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> "DecodeOptions":
        """Options from field names; a None value keeps the default."""
        return cls(**{k: v for k, v in values.items() if v is not None})


DEFAULTS = DecodeOptions()  # for code that takes one option without the command line (tuning's replay)
