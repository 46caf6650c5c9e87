"""Every setting's flag and configuration key, from its one declaration.

Each user-facing field of :class:`~as2d_core.decode.options.DecodeOptions` (declared where decoding
owns it) becomes a flag here (``--budget``) and a key in a task configuration (``budget``,
``target.shared_threads``), so ``as2d run``, ``stream``, ``serve``, ``bench``, the tuning commands
and the configuration schema (``config``) cannot drift apart. The settings of one command that are no
decoding option (the server's queue, a stream's block) are :class:`Setting` rows of ``STREAM`` and ``SERVE``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from as2d_core.decode.options import DecodeOptions, check_budget
from as2d_core.decode.scheduler import SPECULATE_ROWS
from as2d_core.input.stream import BLOCK_S, CONTEXT_S


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


def options_from_config(values: dict[str, Any]) -> DecodeOptions:
    """Options from dotted configuration keys (``{"target.threads": 2, ...}``); absent keys keep defaults."""
    return DecodeOptions.from_values({name: values.get(key) for name, key in config_keys().items()})


def config_schema() -> dict[str, dict[str, tuple]]:
    """Table ("" for the top level) -> key -> (type, low, high, choices) of every option a configuration sets; the
    type is a tuple of types where a configuration may write the value in several ways (temperatures)."""
    schema: dict[str, dict[str, tuple]] = {}
    for f in user_fields():
        table, _, key = f.metadata["config"].rpartition(".")
        meta = f.metadata
        kind = meta.get("config_kinds", meta["kind"])
        schema.setdefault(table, {})[key] = (kind, meta["low"], meta["high"], meta["choices"])
    return schema


# The decoding options one request may set (the server's form fields): faster-whisper's ``transcribe`` options that
# change the tokens, under its names, and as2d's budget; threads, routes and drafting stay the server's own.
REQUEST_OPTIONS = ("beam_size", "best_of", "patience", "length_penalty", "compression_ratio_threshold",
                   "log_prob_threshold", "no_speech_threshold", "condition_on_previous_text", "multilingual",
                   "prompt_reset_on_temperature", "hotwords", "vad_filter", "clip_timestamps",
                   "hallucination_silence_threshold", "max_new_tokens", "prefix", "suppress_blank",
                   "suppress_tokens", "max_initial_timestamp", "repetition_penalty", "no_repeat_ngram_size", "seed",
                   "prepend_punctuations", "append_punctuations", "chunk_length", "budget")
NONE = ("none", "null")  # turns off an optional option (faster-whisper's None thresholds)


def truth(text: str, name: str) -> bool:
    """A yes/no setting written as text (a form field)."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise ValueError(f"'{name}' must be true or false, not {text!r}")


def option_from_text(name: str, text: str) -> Any:
    """A decoding option's value from text, read as its declaration says (a whole number, a number, yes/no, a
    word; ``none`` where None turns it off); its range is checked where the options are made. A ValueError
    names the option."""
    meta = attrs.fields_dict(DecodeOptions)[name].metadata
    kind = meta["kind"]
    if meta["optional"] and text.lower() in NONE:
        return None
    if kind is bool:
        return truth(text, name)
    if kind is str:
        return text
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        what = "a whole number" if kind is int else "a number"
        raise ValueError(f"{name} must be {what}{' or none' if meta['optional'] else ''}, not {text!r}")
    return value


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
    Setting("block_s", BLOCK_S, "Seconds of audio per block."),
    Setting("context_s", CONTEXT_S, "The context view (audio) persists this long, then resets."),
)

# ``as2d serve``: admission, limits and the test faults (as2d_serve.app.Limits, service.ServeSettings)
SERVE = _table(
    Setting("queue_size", 8, "Requests that may wait; more get 429.", 0),
    Setting("max_upload_mb", 25.0, "Larger uploads get 413 (OpenAI's own limit).", 0),
    Setting("deadline_s", 120.0, "Seconds from arrival to answer for each 30 s of audio; later ones get 504 and "
            "their decoding is stopped.",
            0, flag="--deadline"),
    Setting("grace_s", 20.0, "After SIGINT/SIGTERM, seconds that decodes under way may finish in; then 503 with "
            "Retry-After (Kubernetes allows 30 s in all).", 0),
    Setting("slots", 1, "Requests decoded at once on one copy of the models, their target calls batched step by step "
            "(as2d_core.decode.scheduler); 1: one at a time, each decode alone.", 1),
    Setting("speculate_rows", SPECULATE_ROWS, "With --slots over 1: a request drafts only when fewer than this many "
            "decode beside it; later ones run target-only (their drafters never start).", 0),
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
