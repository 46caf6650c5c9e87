"""Every key of a task configuration reaches the pipeline options of ``run``, ``stream``, ``serve`` and ``bench``.

Each command runs through its real click code path with ``--config`` naming a file that sets every
key to a value other than its default; the commands stop where decoding would start (a pipeline's
``transcribe`` or ``stream``, the bench's ``run``, the server's app), and what they would decode
with is compared with the file. The parts are registered test doubles, so no model loads; the target
aligns words (a ``WordAligner``), so ``word_timestamps`` on gets as far as any other key.
"""
from __future__ import annotations

import itertools
import json
import wave
from pathlib import Path

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from as2d_core.setup import catalog, plugins
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.options import REQUEST_OPTIONS, option_from_text, user_fields
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from tiny_lm import ScriptedSource, TinyLM

TARGET, SOURCE = "config-test-target", "config-test-source"
LANGUAGE, TASK, INSTRUCTION = "de", "qa", "Answer the question the passage ends with."
PROFILE = Path(__file__).resolve().parent / "fixtures" / "profile-no-drafting.json"  # absolute: read as written


class Arrived(Exception):
    """Raised where a command would start decoding: what it decodes with has arrived."""


class WordsTarget(TinyLM):
    """The test target, with word timestamps (``capabilities.WordAligner``): records the threads it prepared them on."""

    def __init__(self):
        super().__init__()
        self.name = TARGET
        self.features = frozenset({"word_timestamps"})
        self.words_prepared: list[int] = []

    def prepare_words(self, threads: int) -> None:
        self.words_prepared.append(threads)

    def align_words(self, request, language, tokens, threads):
        raise AssertionError("no command decodes in these tests")


def _other_values() -> dict[str, object]:
    """Every decoding option's configuration key -> a valid value that is not its default, each int distinct."""
    values, used = {}, set()
    for field in user_fields():
        low, high, choices = field.metadata["low"], field.metadata["high"], field.metadata["choices"]
        if choices:
            value = next(c for c in choices if c != field.default)
        elif field.metadata["kind"] is bool:
            value = not field.default
        elif field.name == "batch_windows":  # auto, or a wave size
            value = 3
        elif field.name == "profile":  # a file that must be a device profile
            value = str(PROFILE)
        elif "config_kinds" in field.metadata:  # temperatures: a list in a file
            value = [0.0, 0.3]
        elif field.metadata["kind"] is str:
            value = f"the {field.name} of this file"
        elif field.metadata["kind"] is float and high is not None:  # a fraction: between its bounds
            value = next(x for x in (0.25, 0.5, 0.75) if x != field.default and low <= x <= high)
        else:
            value = next(x for x in itertools.count(low or 0) if x != field.default and x not in used)
            assert high is None or value <= high, field.name
            used.add(value)
        values[field.metadata["config"]] = value
    return values


def _toml(values: dict[str, object]) -> str:
    """Dotted keys -> a TOML file (top-level keys first, then one table per prefix)."""
    tables: dict[str, dict] = {}
    for dotted, value in values.items():
        table, _, key = dotted.rpartition(".")
        tables.setdefault(table, {})[key] = value
    lines = []
    for table in sorted(tables, key=bool):
        lines += [f"[{table}]"] if table else []
        lines += [f"{key} = {json.dumps(value)}" for key, value in tables[table].items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def built(monkeypatch):
    """Only the built-in parts plus a test target and source; returns what was built (kind, name, options)."""
    monkeypatch.setenv(plugins.ENV_ALLOWLIST, "")
    catalog._PROBES.clear()
    registry = plugins.load_registry(refresh=True)
    parts = []

    def target(options):
        parts.append(("target", TARGET, options))
        return WordsTarget()

    def source(options):
        parts.append(("source", SOURCE, options))
        return ScriptedSource([3, 4, 5], name=SOURCE)

    registry.add("target", "test", TARGET, target, {"vocabulary": "tiny"})
    registry.add("source", "test", SOURCE, source, {"vocabulary": "tiny"})
    yield parts
    plugins._REGISTRY = None
    catalog._PROBES.clear()


@pytest.fixture
def arrived(monkeypatch):
    """Stops every command where it would decode, keeping what it would decode with."""
    import as2d_serve.app
    from as2d_bench.runner import Bench

    seen = {}

    def keep(key):
        def stop(self, *args, **kwargs):
            seen[key], seen["args"] = self, args
            raise Arrived
        return stop

    monkeypatch.setattr(Pipeline, "transcribe", keep("pipeline"))
    monkeypatch.setattr(Pipeline, "stream", keep("pipeline"))
    monkeypatch.setattr(Bench, "run", keep("bench"))
    monkeypatch.setattr(as2d_serve.app, "create_app", lambda service, limits: keep("service")(service))
    return seen


@pytest.fixture
def files(tmp_path):
    """A short WAV and a manifest with one window in the configuration's language and one in another."""
    audio = tmp_path / "a.wav"
    with wave.open(str(audio), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16_000)
        f.writeframes((np.sin(np.arange(8000) / 9.0) * 8000).astype(np.int16).tobytes())
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": f"w-{lang}", "path": audio.name, "lang": lang}) + "\n"
                                for lang in ("en", LANGUAGE)))
    return audio, manifest


def _config(tmp_path, method: str) -> tuple:
    """A file that sets every key to a value other than its default, and the pipeline options it asks for."""
    decode = _other_values()
    path = tmp_path / "every-key.toml"
    path.write_text(_toml({"method": method, "language": LANGUAGE, "task": TASK, "instruction": INSTRUCTION,
                           "target.model": TARGET, "source.name": SOURCE, **decode}))
    options = PipelineOptions(method=method, language=LANGUAGE, task=TASK, instruction=INSTRUCTION,
                              decode=DecodeOptions(**{f.name: decode[f.metadata["config"]] for f in user_fields()}))
    assert options.decode != DecodeOptions() and all(
        getattr(options.decode, f.name) != f.default for f in user_fields())
    return path, options


def _invoke(command: str, path, files, tmp_path, *flags: str) -> None:
    """``command --config path`` with ``flags``, run until it would decode."""
    from as2d_bench.cli import bench
    from as2d_core.cli.main import run
    from as2d_core.cli.stream import stream
    from as2d_serve.plugin import serve

    audio, manifest = files
    cli, args = {
        "run": (run, [audio]),
        "stream": (stream, [audio]),
        "serve": (serve, ["--decodes", "1"]),
        "bench": (bench, [manifest, "--out", tmp_path / "out", "--no-warmup"]),
    }[command]
    result = CliRunner().invoke(cli, [str(a) for a in (*args, "--config", path, *flags)])
    assert isinstance(result.exception, Arrived), result.output


def _arrived(command: str, seen: dict) -> tuple[PipelineOptions, list[str]]:
    """The pipeline options the command would decode with, and the names of the models it would use."""
    if command == "serve":  # a request that names nothing: the server's configured defaults
        from as2d_serve.service import Ask, Cancel

        with pytest.raises(Arrived):
            seen["service"].transcribe(Ask(np.zeros(16_000, np.float32), method=None), Cancel())
    if command == "bench":
        bench, (windows,) = seen["bench"], seen["args"]
        (language,) = {w.lang for w in windows}
        options = PipelineOptions(method=bench.methods[-1], language=language, task=bench.task,
                                  instruction=bench.instruction, decode=bench.options)
        return options, [bench.target.name, *(s.name for s in bench.sources)]
    pipeline = seen["pipeline"]
    return pipeline.options, [pipeline.target.name, *([pipeline.source.name] if pipeline.source else [])]


COMMANDS = ("run", "stream", "serve", "bench")


@pytest.mark.parametrize("method", ["target-only", "as2d"])
@pytest.mark.parametrize("command", COMMANDS)
def test_every_configuration_key_arrives(command, method, built, arrived, files, tmp_path):
    path, expected = _config(tmp_path, method)
    _invoke(command, path, files, tmp_path)
    options, models = _arrived(command, arrived)
    assert options == expected
    assert models[0] == TARGET and ([SOURCE] if method == "as2d" else []) == models[1:]
    if command != "bench":  # the bench gives each decode its threads through the options, not when it builds
        threads = {"target": expected.decode.target_threads, "source": expected.decode.drafter_threads}
        assert built and all(part_options["threads"] == threads[kind] for kind, _name, part_options in built)


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_given_override_the_file(command, built, arrived, files, tmp_path):
    path, expected = _config(tmp_path, "as2d")
    _invoke(command, path, files, tmp_path, "--budget", "5", "--start", "arrival")
    options, _ = _arrived(command, arrived)
    assert options == attrs.evolve(expected, decode=attrs.evolve(expected.decode, budget=5, start="arrival"))


@pytest.mark.parametrize("command", COMMANDS)
def test_word_timestamps_is_a_setting_of_every_command(command, built, arrived, files, tmp_path):
    """On in the file: it arrives, and the bench and the server prepare the target's aligner before decoding (the
    server for a request that names no granularity: the server's default); ``--no-word-timestamps`` turns it off."""
    path, expected = _config(tmp_path, "target-only")
    assert expected.decode.word_timestamps
    _invoke(command, path, files, tmp_path)
    options, _ = _arrived(command, arrived)
    assert options.decode.word_timestamps and options.decode.request_fields()["word_timestamps"]
    if command in ("bench", "serve"):
        target = arrived["bench"].target if command == "bench" else arrived["service"].workers.queue[0].target
        assert target.words_prepared == [expected.decode.target_threads]
    arrived.clear()
    _invoke(command, path, files, tmp_path, "--no-word-timestamps")
    options, _ = _arrived(command, arrived)
    assert options.decode.word_timestamps is False


def test_a_requests_options_read_from_text_as_declared():
    """The server's form fields (``REQUEST_OPTIONS``) are decoding options with a flag and a key; each default
    written as text reads back as itself, and ``none`` turns off only an option that None turns off."""
    declared = {f.name: f for f in user_fields()}
    for name in REQUEST_OPTIONS:
        default = declared[name].default
        text = "none" if default is None else str(default).lower()
        assert getattr(DecodeOptions(**{name: option_from_text(name, text)}), name) == default, name
    assert option_from_text("log_prob_threshold", "None") is None
    assert option_from_text("vad_filter", "True") is True and option_from_text("seed", "42") == 42
    assert DecodeOptions(clip_timestamps=option_from_text("clip_timestamps", "2.5,9")).clip_timestamps == (2.5, 9.0)
    with pytest.raises(ValueError, match="beam_size must be a whole number, not 'none'"):
        option_from_text("beam_size", "none")
    with pytest.raises(ValueError, match="length_penalty must be a number, not 'inf'"):
        option_from_text("length_penalty", "inf")
