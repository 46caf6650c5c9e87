"""The decoding options: one frozen record, each user-facing field declared once with its default and bounds.

Decoding owns them (``run_request`` and the proposers read them); each field also carries its
configuration key and help line as metadata, which ``setup.options`` turns into the command-line
flags and the configuration schema, so ``run``, ``stream``, ``serve``, ``bench``, tuning and the
configuration files cannot drift apart.
"""
from __future__ import annotations

import math
from typing import Any

import attrs

from as2d_core.contracts import TIMESTAMPS, WORD_PUNCTUATION, ScoreRules, TokenPrompt

MAX_BUDGET = 64
STARTS = ("arrival", "prepared")
ROUTES = ("seek", "windows")
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's: greedy, then the fallback's
CHUNK_S = 30  # seconds of audio Whisper's encoder reads: the longest request


def listed(value):
    """A flag's text such as ``"0,0.2,0.4"`` (or ``"(0, 0.2)"``) as its parts; any other value as it is."""
    if isinstance(value, str):
        return [part for part in value.strip("()[] ").replace(" ", "").split(",") if part]
    return value


def temperatures(value) -> tuple[float, ...]:
    """Temperatures from a number, a sequence or text such as ``"0,0.2,0.4"`` (a flag's value)."""
    value = listed(value)
    values = tuple(float(t) for t in value) if isinstance(value, (list, tuple)) else (float(value),)
    if not values or any(t < 0 for t in values):
        raise ValueError(f"temperature must be one or more values of at least 0, got {value!r}")
    return values


def clip_times(value) -> tuple[float, ...]:
    """faster-whisper's ``clip_timestamps``: seconds ``start,end,start,end,...`` as text (a flag's) or numbers; an
    odd count runs the last clip to the end. ``()`` (its default ``"0"``, or nothing): the whole audio."""
    given, value = value, listed(value)
    try:
        values = tuple(float(t) for t in value)
    except (TypeError, ValueError):
        values = (-1.0,)
    if any(not math.isfinite(t) or t < 0 for t in values):
        raise ValueError(f"clip_timestamps must be seconds of at least 0, start,end,start,end,..., got {given!r}")
    return () if values == (0.0,) else values


def token_ids(value) -> tuple[int, ...]:
    """faster-whisper's ``suppress_tokens``: token ids as text (a flag's, ``"-1,50,51"``; empty: none) or numbers;
    -1 stands for the model's own set of non-speech tokens."""
    given, value = value, listed(value)
    try:
        values = tuple(int(t) for t in (value or ()))
    except (TypeError, ValueError):
        values = (-2,)
    if any(t < -1 for t in values):
        raise ValueError(f"suppress_tokens must be token ids (-1: the model's non-speech tokens), got {given!r}")
    return values


AUTO = "auto"  # batch_windows: the wave size and drafting priced from the device profile (``input.waves``)
MAX_BATCH_WINDOWS = 16


def wave_size(value) -> int | str:
    """``batch_windows`` from a flag's text, a file's value or code: ``"auto"``, or a whole number 1..16."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    try:
        size = int(value) if not isinstance(value, (bool, float)) else None
    except ValueError:
        size = None
    if size is None or not 1 <= size <= MAX_BATCH_WINDOWS:
        raise ValueError(f"batch_windows must be {AUTO} or a whole number from 1 to {MAX_BATCH_WINDOWS} (windows "
                         f"decoded side by side), got {value!r}")
    return size


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
            choices: tuple[str, ...] | None = None, kind: type | None = None, optional: bool = False,
            converter=None, config_kinds: tuple[type, ...] = (str, list, int, float), api_kinds: tuple[type, ...] = ()):
    """A field that users set: ``config`` is its dotted key in a task configuration; ``low``/``high``
    bound a number, ``choices`` a word; ``kind`` is the value's type where the default (None) does not say it;
    ``optional``: None turns it off (faster-whisper's thresholds); ``converter`` reads a flag's text, and a
    configuration may write the value as any of ``config_kinds``; ``api_kinds``: what else a caller of the API
    may give (no flag or file can)."""
    kind = kind or type(default)
    if converter is not None:
        return attrs.field(default=default, converter=converter, metadata={  # a flag's text, or a list in a file
            "config": config, "help": help, "choices": None, "low": None, "high": None, "kind": str,
            "config_kinds": config_kinds, "optional": False})
    if choices:
        validator = attrs.validators.in_(choices)
    elif kind in (str, bool):
        validator = attrs.validators.instance_of((kind, *api_kinds))
    else:
        validator = _in_range
    if default is None or optional:
        validator = attrs.validators.optional(validator)
    return attrs.field(default=default, validator=validator, metadata={
        "config": config, "help": help, "choices": choices, "low": low, "high": high, "kind": kind,
        "optional": default is None or optional})


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
    prompt: str | TokenPrompt | None = _option(
        None, "prompt", "Whisper's previous-text prompt (initial_prompt): the seek route's first request's (with "
        "--condition-on-previous-text it stays before the text that follows, as Whisper keeps it), every window's on "
        "the windows route (as faster-whisper's batched pipeline gives it); over Whisper's limit of half the "
        "context less one token it is refused.",
        kind=str, api_kinds=(TokenPrompt,))
    hotwords: str | None = _option(
        None, "hotwords", "Words to favour, placed before the previous text of every window as faster-whisper does.",
        kind=str)
    condition_on_previous_text: bool = _option(
        False, "condition_on_previous_text", "Prompt each window of a file with the text before it (after --prompt), "
        "as Whisper's long-form transcription does; the drafter then drafts a window only once the one before it is "
        "done. Files only: bench windows and stream blocks are each decoded alone.")
    multilingual: bool = _option(
        False, "multilingual", "Without --language, the target detects the language on every request of the seek "
        "route, as faster-whisper's multilingual; off, the first request's language is every later request's, as "
        "faster-whisper reads it once from the first 30 s. The windows route detects it per window.")
    batch_windows: int | str = _option(
        AUTO, "batch_windows", "Windows of a file decoded side by side (--route windows), their verifications made in "
        "one call of a target that can (whisper-base and whisper-base-int8 on ONNX Runtime); each window's tokens are "
        "the ones it gets alone. auto: the wave size (1, 2, 4 or 8) and whether the windows draft, priced from "
        "--profile's batch costs, else waves of 4 drafting (measured on 2 cores); a number: waves of that many, drafting "
        "unless --profile prices it above target-only at that size; 1: one window at a time. Beams (--beam-size over "
        "1 at --temperature 0) search a wave's windows side by side, target-only, in waves of this many (auto: 4). "
        "Files only, and not with --condition-on-previous-text (a window waits for the text before it) nor while "
        "text is streamed as it is committed.", converter=wave_size, config_kinds=(str, int))
    profile: str | None = _option(
        "auto", "profile", "A device profile (as2d profile's JSON) whose costs decide whether drafting pays: on the "
        "seek route, --batch-windows' waves and as2d serve's --speculate-rows; in a configuration, a relative "
        "path is read from the configuration's folder. auto: this machine's newest profile of the target and drafter "
        "in $AS2D_PROFILES_DIR (~/.local/share/as2d/profiles, where as2d profile writes), if there is one; none: no "
        "profile.", kind=str, optional=True)
    word_timestamps: bool = _option(
        False, "word_timestamps", "Time every word (start, end, probability) by the target's cross-attention after "
        "decoding, as openai-whisper does: one pass over the committed tokens, so it costs every method the same "
        "(words_s in --json and in bench rows). The server gives words in verbose_json when a request names no "
        "timestamp_granularities.")
    # How a file is decoded, and the decoding mode: faster-whisper's ``transcribe`` options that change the tokens,
    # under its names, with its defaults except where the README says why (``decode.fallback``, ``input.seek``)
    route: str = _option(
        "seek", "route", "seek: Whisper's long-form rules, as faster-whisper's WhisperModel.transcribe: 30 s requests "
        "from a seek offset that moves to the last timestamp, so speech after an early end is decoded again, with the "
        "temperature fallback; windows: the audio cut at pauses, each window decoded once in the first temperature's "
        "mode (as BatchedInferencePipeline; side by side with --batch-windows).", choices=ROUTES)
    chunk_length: int = _option(
        CHUNK_S, "chunk_length", "Seconds of audio a request reads (faster-whisper's chunk_length): the seek route's "
        "segments, the windows route's longest window, the language detector's segments; each is zero-padded to "
        "Whisper's 30 s, as faster-whisper pads it.", 1, CHUNK_S)
    beam_size: int = _option(1, "beam_size", "Beams of the target's beam search at temperature 0 (1: greedy, the "
                             "target's own greedy tokens; faster-whisper's default is 5).", 1, 16)
    best_of: int = _option(5, "best_of", "Samples drawn at a temperature above 0; the likeliest is kept.", 1, 16)
    patience: float = _option(1.0, "patience", "Beam search stops once beam_size x patience hypotheses ended.", 0)
    length_penalty: float = _option(1.0, "length_penalty", "Beam and best-of ranking: cumulative log-probability "
                                    "over length ** length_penalty.", 0)
    temperature: tuple[float, ...] = _option(
        DEFAULT_TEMPERATURES, "temperature", "Temperatures tried in turn (comma-separated): each next one only when "
        "the result repeats itself or is unsure (the thresholds below); above 0 the target samples with noise drawn from "
        "--seed, so speculation stays exact.", converter=temperatures)
    compression_ratio_threshold: float | None = _option(
        2.4, "compression_ratio_threshold", "A result whose text compresses better than this is decoded again, hotter.",
        0, optional=True)
    log_prob_threshold: float | None = _option(
        -1.0, "log_prob_threshold", "A result whose average log-probability is below this is decoded again, hotter.",
        optional=True)
    no_speech_threshold: float | None = _option(
        0.6, "no_speech_threshold", "A request whose no-speech probability is over this while unsure is silence: "
        "skipped.", 0, 1, optional=True)
    prompt_reset_on_temperature: float = _option(
        0.5, "prompt_reset_on_temperature", "With --condition-on-previous-text, a result kept at a temperature over "
        "this starts the previous text afresh.", 0)
    seed: int = _option(0, "seed", "The sampling noise's seed: the same seed gives the same transcript.", 0)
    vad_filter: bool = _option(False, "vad_filter", "Decode only the speech the voice-activity detector finds, "
                               "joined, as faster-whisper's vad_filter (times stay the file's). The windows route "
                               "does so for audio longer than a window whatever is given.")
    max_new_tokens: int | None = _option(
        None, "max_new_tokens", "At most this many tokens in each response (timestamps included), as faster-whisper's "
        "option of this name; a prompt that leaves less room than this in the model's context is refused, as "
        "faster-whisper refuses it. Unset: what the context holds.", 1, optional=True, kind=int)
    hallucination_silence_threshold: float | None = _option(
        None, "hallucination_silence_threshold", "With --word-timestamps, seconds of silence around a segment whose "
        "words look made up (improbable, too short or too long) for it to be dropped, with what follows it in its "
        "request, and the seek moved to it, as faster-whisper's option of this name (input.hallucinations). Seek "
        "route; unset: off.", 0, optional=True, kind=float)
    clip_timestamps: tuple[float, ...] = _option(
        (), "clip_timestamps", "Decode only these spans of the audio, in seconds start,end,start,end,... (an odd "
        "count: the last to the end), as faster-whisper's clip_timestamps: on the seek route each clip is walked "
        "from its start, on the windows route each is one window of at most 30 s; the voice-activity detector is "
        "then not used (faster-whisper ignores vad_filter with clips). Files only; unset: the whole audio.",
        converter=clip_times, config_kinds=(str, list))
    prefix: str | None = _option(
        None, "prefix", "Text each response is made to start with, as faster-whisper's prefix: on the seek route the "
        "first request's (at 0 s), on the windows route every window's; hotwords are then not used there.", kind=str)
    suppress_blank: bool = _option(True, "suppress_blank", "A response never starts with a blank or the end token "
                                   "(faster-whisper's suppress_blank).")
    suppress_tokens: tuple[int, ...] = _option(
        (-1,), "suppress_tokens", "Token ids never chosen (comma-separated; -1: the model's non-speech tokens; empty: "
        "none beyond the task tokens), as faster-whisper's suppress_tokens.", converter=token_ids,
        config_kinds=(str, list, int))
    max_initial_timestamp: float = _option(
        1.0, "max_initial_timestamp", "With timestamps, a response's first timestamp is at most this many seconds.",
        0, kind=float)
    repetition_penalty: float = _option(
        1.0, "repetition_penalty", "Scores of tokens already in the response are divided by this (multiplied when "
        "negative), as faster-whisper's repetition_penalty; 1: off.", 0, kind=float)
    no_repeat_ngram_size: int = _option(
        0, "no_repeat_ngram_size", "No n-gram of this size is repeated within a response (0: off), as "
        "faster-whisper's no_repeat_ngram_size.", 0)
    prepend_punctuations: str = _option(
        WORD_PUNCTUATION[0], "prepend_punctuations", "With word timestamps, these marks are joined to the word after "
        "them, as faster-whisper's prepend_punctuations.", kind=str)
    append_punctuations: str = _option(
        WORD_PUNCTUATION[1], "append_punctuations", "With word timestamps, these marks are joined to the word before "
        "them, as faster-whisper's append_punctuations.", kind=str)
    drain_timeout_s: float = 2.0
    # as2d-no-bc (SpecASR's budget rule kept with decoupled drafting): candidates end at the first
    # published token whose confidence is below this (that token included); None keeps the fixed budget.
    confidence_stop: float | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if self.repetition_penalty <= 0:  # CTranslate2's rule: the scores are divided by it
            raise ValueError(f"repetition_penalty must be above 0, got {self.repetition_penalty}")

    @property
    def filters_speech(self) -> bool:
        """Whether the voice-activity detector picks the speech to decode: ``vad_filter``, unless clips are given."""
        return self.vad_filter and not self.clip_timestamps

    def request_fields(self) -> dict[str, Any]:
        """What these options put in a request on their own (the pipeline adds each window's previous text)."""
        return {"timestamps": self.timestamps or "none", "prompt": self.prompt, "hotwords": self.hotwords,
                "word_timestamps": self.word_timestamps, "temperature": self.temperature[0], "seed": self.seed,
                "max_new_tokens": self.max_new_tokens, "prefix": self.prefix, "rules": self.score_rules,
                "punctuations": (self.prepend_punctuations, self.append_punctuations)}

    @property
    def score_rules(self) -> ScoreRules:
        return ScoreRules(self.suppress_blank, self.suppress_tokens, self.max_initial_timestamp,
                          self.repetition_penalty, self.no_repeat_ngram_size)

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> "DecodeOptions":
        """Options from field names; a None value keeps the default."""
        return cls(**{k: v for k, v in values.items() if v is not None})


DEFAULTS = DecodeOptions()  # for code that takes one option without the command line (tuning's replay)
