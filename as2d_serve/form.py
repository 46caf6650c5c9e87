"""One transcription request's multipart form, read and checked as OpenAI's endpoint reads it.

Everything is checked before the request queues (bad input costs no decode slot). ``model`` is required, as OpenAI
requires it; ``whisper-1``, the target's own name and faster-whisper's names of it (``base``,
``Systran/faster-whisper-base``, as faster-whisper's servers are asked) all mean the target this server runs.
``srt``, ``vtt`` and ``verbose_json`` are answered in Whisper's timestamp segments unless the server was started
with ``--timestamps none`` (OpenAI gives segments there too, and so does ``as2d run --format srt``);
``timestamp_granularities`` segment asks for them whatever the server's mode. ``stream=true`` decodes on the windows
route, each window once, so that each piece of text goes out as the target commits it (Whisper's long-form seeks may
decode the end of a request again). ``chunking_strategy`` (``auto``, or a ``server_vad`` object) is faster-whisper's
``vad_filter`` with the object's settings as its ``vad_parameters``. Beside OpenAI's fields a request may set
faster-whisper's decoding options under their names (``beam_size``, ``vad_filter``, ...: ``REQUEST_OPTIONS``) and
as2d's own (``method``, ``source``, ``budget``, ``check``); any other field is refused, never ignored.
"""
from __future__ import annotations

import json
import math

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from as2d_core.setup.options import REQUEST_OPTIONS, option_from_text, truth

from .formats import FORMATS
from .service import Ask, InputError, TranscriptionService
from .upload import decode_upload

GRANULARITIES = ("word", "segment")  # timestamp_granularities: words, and Whisper's timestamp segments
STREAMED = ("json", "text")  # response formats a stream can carry whole (text only; OpenAI's rule too)
SEGMENTED = ("srt", "vtt", "verbose_json")  # formats in Whisper's segments unless the server's mode says none
# OpenAI's chunking_strategy server_vad fields -> the detector's options (``hookspecs.DETECTOR_OPTIONS``), each
# with its kind and least value: the speech threshold (up to 1), the pause that ends speech, the padding kept before it
SERVER_VAD = {"threshold": ("threshold", float, 0.0), "silence_duration_ms": ("min_silence_ms", int, 0),
              "prefix_padding_ms": ("pad_ms", int, 0)}
CHUNKING = ("chunking_strategy", "chunking_strategy[type]", *(f"chunking_strategy[{name}]" for name in SERVER_VAD))
OPENAI_FIELDS = ("file", "model", "language", "prompt", "response_format", "temperature", "stream",
                 "timestamp_granularities[]", "timestamp_granularities", *CHUNKING)
AS2D_FIELDS = ("method", "source", "check")
FIELDS = OPENAI_FIELDS + AS2D_FIELDS + REQUEST_OPTIONS


class MissingParameter(InputError):
    """A parameter OpenAI requires is absent: 400, with the parameter named in the error's ``param``."""

    def __init__(self, param: str):
        super().__init__(f"you must provide a {param} parameter")
        self.param = param


def form_field(form, name: str) -> str | None:
    value = form.get(name)
    if value is None or isinstance(value, UploadFile):
        return None if value is None else "<file>"
    value = value.strip()
    return value or None


def flag(value: str | None, name: str) -> bool:
    try:
        return value is not None and truth(value, name)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def decoding(form) -> dict:
    """The request's own decoding options (``REQUEST_OPTIONS``), read as their declarations say; the rest are the
    server's. A field this server does not know is refused, as ``WhisperModel.transcribe`` refuses an option."""
    unknown = [name for name in form.keys() if name not in FIELDS]
    if unknown:
        raise InputError(f"unknown form field {unknown[0]!r}; a request may set {', '.join(FIELDS[1:])}")
    values = {}
    for name in REQUEST_OPTIONS:
        text = form_field(form, name)
        if text is not None:
            try:
                values[name] = option_from_text(name, text)
            except ValueError as exc:
                raise InputError(str(exc)) from None
    return values


def granularities(form) -> tuple[str, ...]:
    """``timestamp_granularities[]`` (how the openai client sends a list) or ``timestamp_granularities``."""
    given = [value for key in ("timestamp_granularities[]", "timestamp_granularities") for value in form.getlist(key)]
    if any(isinstance(value, UploadFile) for value in given):
        raise InputError("timestamp_granularities must be text: word or segment")
    names = [part.strip() for value in given for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in GRANULARITIES]
    if unknown:
        raise InputError(f"unknown timestamp granularity {unknown[0]!r}; choose {' or '.join(GRANULARITIES)}")
    return tuple(dict.fromkeys(names))


def chunking(form) -> dict | None:
    """OpenAI's ``chunking_strategy``: ``auto`` or a ``server_vad`` object (as the openai client sends one, a
    ``chunking_strategy[name]`` field each, or as JSON text) -> the voice-activity detector's options for this
    request (``{}`` for auto), which turn ``vad_filter`` on; None when unset (the audio is one block, OpenAI's
    default too)."""
    given = {name[len("chunking_strategy["):-1]: form_field(form, name) for name in CHUNKING[1:]}
    given = {name: value for name, value in given.items() if value is not None}
    text = form_field(form, "chunking_strategy")
    if text is not None and given:
        raise InputError("give chunking_strategy as one value or as its fields, not both")
    if text is None and not given:
        return None
    if text == "auto":
        return {}
    if text is not None:
        try:
            given = json.loads(text)
        except ValueError:
            given = None
        if not isinstance(given, dict):
            raise InputError(f"chunking_strategy must be 'auto' or a server_vad object, not {text!r}")
    if given.get("type") != "server_vad":
        raise InputError(f"chunking_strategy's type must be 'server_vad', not {given.get('type')!r}")
    unknown = [name for name in given if name != "type" and name not in SERVER_VAD]
    if unknown:
        raise InputError(f"unknown chunking_strategy field {unknown[0]!r}; a server_vad object sets "
                         f"{', '.join(SERVER_VAD)}")
    return {SERVER_VAD[name][0]: _server_vad_value(name, value) for name, value in given.items() if name != "type"}


def _server_vad_value(name: str, value) -> float | int:
    _key, kind, least = SERVER_VAD[name]
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not least <= number <= (1.0 if kind is float else math.inf) or (kind is int and not number.is_integer()):
        what = "a number from 0 to 1" if kind is float else "a whole number of milliseconds, 0 or more"
        raise InputError(f"chunking_strategy's {name} must be {what}, not {value!r}")
    return kind(number)


def temperature(text: str | None) -> float | None:
    """OpenAI's ``temperature``: 0 to 1; 0 (or none) lets the decoder raise it by its fallback rules, as OpenAI's
    does; above 0 every request is sampled at it (seeded, so as2d's output is still the target's own)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise InputError(f"temperature must be a number from 0 to 1, not {text!r}")
    return value


async def read_ask(request, task: str, service: TranscriptionService) -> tuple[Ask, str, bool]:
    """The request's ``Ask``, response format and whether it streams; an ``InputError`` names what is wrong."""
    try:
        form = await request.form(max_files=1, max_fields=2 * len(FIELDS))
    except Exception as exc:  # malformed multipart
        raise InputError(f"the request body is not a valid multipart form ({exc})") from exc
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InputError("missing the audio upload: send it as the multipart field 'file'")
    model = form_field(form, "model")
    if model is None:
        raise MissingParameter("model")
    if model not in service.model_names:
        raise InputError(f"unknown model {model!r}; this server runs {service.target_name} "
                         f"(also accepted: {', '.join(service.model_names[1:])})")
    response_format = form_field(form, "response_format") or "json"
    if response_format not in FORMATS:
        raise InputError(f"unknown response_format {response_format!r}; choose one of {', '.join(FORMATS)}")
    named = granularities(form)
    if named and response_format != "verbose_json":
        raise InputError(f"timestamp_granularities need response_format 'verbose_json', not {response_format!r}")
    stream = flag(form_field(form, "stream"), "stream")
    if stream and response_format not in STREAMED:
        raise InputError(f"stream=true sends text only: response_format must be {' or '.join(STREAMED)}, "
                         f"not {response_format!r} (its segments and times would be lost)")
    language, method, source = (form_field(form, name) for name in ("language", "method", "source"))
    options = decoding(form)
    vad = chunking(form)
    if vad is not None:
        if options.get("vad_filter") is False:
            raise InputError("chunking_strategy cuts the audio at the pauses the voice-activity detector finds; "
                             "vad_filter=false asks for no detector")
        options["vad_filter"] = True
    check = flag(form_field(form, "check"), "check")
    service.check(language, method, source, options)
    data = await upload.read()
    samples = await run_in_threadpool(decode_upload, data)
    # Whisper's previous-text prompt: the target refuses one over its limit (400), as the command line does
    # words only where the format has room for them: named granularities, else the server's word_timestamps
    verbose = response_format == "verbose_json"
    ask = Ask(samples, language=language, method=method, source=source, decoding=options, check=check, task=task,
              temperature=temperature(form_field(form, "temperature")),
              prompt=form_field(form, "prompt"), timestamps="segment" if "segment" in named else None,
              format_timestamps="segment" if response_format in SEGMENTED else None,
              word_timestamps=("word" in named if named else None) if verbose else False, scores=verbose,
              stream=stream, vad=vad)
    return ask, response_format, stream
