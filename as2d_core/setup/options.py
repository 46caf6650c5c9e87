"""Every setting's one home: its default, bound, command-line flag and configuration key.

Each user-facing field of :class:`DecodeOptions` carries its flag (``--budget``), its key in a
task configuration (``budget``, ``target.shared_threads``) and a help line, so ``as2d run``,
``stream``, ``serve``, ``bench``, the tuning commands and the configuration schema (``config``)
cannot drift apart. The settings of one command that are no decoding option (the server's queue,
a stream's block) are :class:`Setting` rows of ``STREAM`` and ``SERVE``.
"""
from __future__ import annotations

from collections.abc import Callable
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

    @classmethod
    def from_config(cls, values: dict[str, Any]) -> "DecodeOptions":
        """Options from dotted configuration keys (``{"target.threads": 2, ...}``); absent keys keep defaults."""
        return cls.from_values({name: values.get(key) for name, key in config_keys().items()})


def user_fields() -> list[attrs.Attribute]:
    """The fields a user sets from the command line or a configuration."""
    return [f for f in attrs.fields(DecodeOptions) if "config" in f.metadata]


def bounds(name: str) -> tuple[int | None, int | None]:
    """The lowest and highest value of a decoding option (None: no bound)."""
    meta = attrs.fields_dict(DecodeOptions)[name].metadata
    return meta["low"], meta["high"]


def config_keys() -> dict[str, str]:
    """Field name -> dotted configuration key."""
    return {f.name: f.metadata["config"] for f in user_fields()}


def config_schema() -> dict[str, dict[str, tuple]]:
    """Table ("" for the top level) -> key -> (type, low, high, choices) of every option a configuration sets."""
    schema: dict[str, dict[str, tuple]] = {}
    for f in user_fields():
        table, _, key = f.metadata["config"].rpartition(".")
        meta = f.metadata
        schema.setdefault(table, {})[key] = (meta["kind"], meta["low"], meta["high"], meta["choices"])
    return schema


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def decode_flag(name: str) -> Callable:
    """The click option of one decoding option (``"align_window"`` -> ``--align-window``), with its default and help."""
    import click

    field = attrs.fields_dict(DecodeOptions)[name]
    meta = field.metadata
    if meta["kind"] is bool:  # --name/--no-name, so a flag can also turn off what a configuration turns on
        return click.option(f"{flag(name)}/--no-{flag(name)[2:]}", name, default=field.default, show_default=True,
                            help=meta["help"])
    kind = click.Choice(meta["choices"]) if meta["choices"] else meta["kind"]
    return click.option(flag(name), name, type=kind, default=field.default, show_default=True, help=meta["help"])


def option_flags(command: Callable) -> Callable:
    """Add one click option per user-facing field, with the field's default and help."""
    for field in reversed(user_fields()):
        command = decode_flag(field.name)(command)
    return command


DEFAULTS = DecodeOptions()  # for code that takes one option without the command line (tuning's replay)


@attrs.frozen
class Setting:
    """A command's setting that is no decoding option (the server's queue, say), declared once so that its
    flag and the code run without the command line (tests, soaks) share one default and one bound."""

    name: str  # the command's parameter
    default: int | float
    help: str
    low: int | float | None = None
    high: int | float | None = None
    flag: str | None = None  # default: --name

    def option(self, command: Callable) -> Callable:
        import click

        ranged = click.IntRange if isinstance(self.default, int) else click.FloatRange
        kind = ranged(self.low, self.high) if (self.low, self.high) != (None, None) else type(self.default)
        return click.option(self.flag or flag(self.name), self.name, type=kind, default=self.default,
                            show_default=True, help=self.help)(command)


def _table(*settings: Setting) -> dict[str, Setting]:
    return {s.name: s for s in settings}


# ``as2d stream`` and ``Pipeline.stream``: the blocks a stream arrives in and the context each is decoded over
STREAM = _table(
    Setting("block_s", 4.0, "Seconds of audio per block."),
    Setting("context_s", 12.0, "The context view (audio) persists this long, then resets."),
)

# ``as2d serve``: admission, limits and the test faults (as2d_serve.app.Limits, service.ServeSettings)
SERVE = _table(
    Setting("queue_size", 8, "Requests that may wait; more get 429.", 0),
    Setting("max_upload_mb", 25.0, "Larger uploads get 413 (OpenAI's own limit).", 0),
    Setting("deadline_s", 120.0, "Seconds from arrival to answer; later ones get 504 and their decoding is stopped.",
            0, flag="--deadline"),
    Setting("grace_s", 20.0, "After SIGINT/SIGTERM, seconds that decodes under way may finish in; then 503 with "
            "Retry-After (Kubernetes allows 30 s in all).", 0),
    Setting("fault_every", 1, "Inject a fault on every n-th request.", 1),
    Setting("stall_s", 20.0, "How long the 'stall' fault blocks.", 0),
)


def parse_budgets(text: str | None) -> list[int] | None:
    """``"1-16"``, ``"3,7,9-11"`` -> sorted budgets, each within 1..MAX_BUDGET."""
    if not text:
        return None
    out: set[int] = set()
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.update(range(lo, hi + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise ValueError(f"budgets must be integers or ranges such as 1-16 or 3,7, got {text!r}") from None
    if not out:
        raise ValueError(f"no budget in {text!r}")
    for budget in (min(out), max(out)):
        check_budget(budget)
    return sorted(out)
