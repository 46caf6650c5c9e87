"""The hooks a plugin implements. Each ``register_*`` hook receives a ``register`` callback.

A plugin is any module with ``@hookimpl`` functions, exposed through the ``as2d``
entry-point group; the core's own parts (the ``identity`` and ``text`` bridges, the built-in
decoding methods) are registered the same way, as the plugin ``as2d.builtins``. ``AS2D_PLUGINS`` (a
comma-separated list of entry-point names; empty means none) restricts which
entry-point plugins load, so tests see a known set.

Calling convention: ``register(name, factory, **info)`` (methods: ``register(method)``,
a ``decode.methods.Method``, which holds its own facts). The ``info`` keywords are
what listings and ``as2d config check`` read without building anything; every key
is optional. They are the only home of these facts: ``registry.toml`` holds just
which plugin provides a part and how to install it, for listings of absent plugins.

- ``description``: one line for listings.
- ``tasks``: tuple of tasks served (``"asr"``, ``"translate"``, ``"qa"``).
- ``languages``: tuple of language codes, or ``None`` for any language.
- ``vocabulary``: tokenizer identity. A source whose vocabulary equals the
  target's needs no bridge; otherwise some registered bridge must connect them.
- ``decodes_text`` (sources, default True) / ``encodes_text`` (targets, default
  True): whether token ids can be turned into text / text into token ids.
- ``connects`` (bridges): tuple of ``(source_vocabulary, target_vocabulary)``
  pairs, ``"*"`` matching any vocabulary; ``needs``: capabilities the pair must
  have, from ``("decodes_text", "encodes_text")``. The built-in ``text`` bridge
  is ``connects=(("*", "*"),), needs=("decodes_text", "encodes_text")``.
- ``backends``: tuple of backend names the model runs on (empty: self-contained).
- ``devices`` (backends): tuple of device names the backend knows.
- ``model_dir``: folder name under ``as2d_core.setup.paths.models_dir()``.
- ``required_files``: tuple of file names that folder must hold; ``backend_files``:
  ``{backend: files}`` a backend reads besides; ``file_alternatives``: ``{file:
  files that stand in for it}`` (a sharded checkpoint's index).
- ``layout``: how to make that folder; ``model_install``: the command that makes
  it, if there is one.
- ``notes`` (backends): ``{device: why it may not run}`` for devices the probe
  does not report.
- ``install``: the command that installs the plugin providing this part.

Factories of targets and sources are called with one options dict of these keys (a factory uses
those it has and ignores the rest) and return a ``contracts.Target`` /
``contracts.Source``: ``models_dir``; ``model_dir``, a folder of the user's own weights in the
part's format; ``backend``, ``device``, ``threads``; ``preload_threads``, the thread counts the caller
will run a target at (``build.target_thread_counts``: its sessions are built as it loads); ``audio_cache``, how
many recent audios' encoder outputs to keep for a caller that decodes the same audio again (0, the default, keeps
none). Detector factories get ``DETECTOR_OPTIONS`` keys: faster-whisper's VAD options
``threshold``, ``neg_threshold``, ``min_speech_duration_ms``, ``min_silence_duration_ms`` and ``speech_pad_ms``
as ``threshold``, ``neg_threshold``, ``min_speech_ms``, ``min_silence_ms`` and ``pad_ms`` (the longest span is
an argument of ``speech_spans``).
"""
import pluggy

DETECTOR_OPTIONS = ("threshold", "neg_threshold", "min_speech_ms", "min_silence_ms", "pad_ms")

hookspec = pluggy.HookspecMarker("as2d")
hookimpl = pluggy.HookimplMarker("as2d")


@hookspec
def register_targets(register):
    """Register target models: ``register(name, factory, **info)``; ``factory(options) -> Target``."""


@hookspec
def register_sources(register):
    """Register drafter sources: ``register(name, factory, **info)``; ``factory(options) -> Source``."""


@hookspec
def register_backends(register):
    """Register runtimes: ``register(name, probe, **info)``; ``probe() -> {device: None if it runs here, else why not}``."""


@hookspec
def register_bridges(register):
    """Register tokenizer bridges: ``register(name, factory, **info)`` with ``connects`` and ``needs`` info."""


@hookspec
def register_models(register):
    """Register installable model files: ``register(name, installer, **info)``; ``installer(models_dir, force=False)``."""


@hookspec
def register_detectors(register):
    """Register voice-activity detectors: ``register(name, factory, **info)``; ``factory(options) -> windows.SpeechDetector``."""


@hookspec
def register_peers(register):
    """Register outside peers for ``as2d bench``: ``register(name, factory, **info)``;
    ``factory(options) -> peers.Peer`` with options ``threads`` and ``models_dir``. Info ``default``
    (bool, default False): whether ``as2d bench`` runs it when ``--methods`` is not given; ``whole_file``
    (bool, default False): the peer is also a ``peers.FilePeer``, for ``scripts/bench_long_audio.py``."""


@hookspec
def register_methods(register):
    """Register decoding methods: ``register(method)`` with a ``decode.methods.Method``; ``run_request``,
    ``as2d run --method`` and ``as2d bench --methods`` then run it by its name."""


@hookspec
def register_commands(cli):
    """Add extra click commands to the ``as2d`` command group."""
