"""Which target a faster-whisper model name, path or compute type means here.

as2d downloads nothing: a size name means an installed target (``as2d models install``), a checkpoint faster-whisper
already downloaded (found in its download cache, ``download_root`` or Hugging Face's, without a network), and a
path is an as2d model folder or a checkpoint the user brings; a checkpoint is converted once
(``as2d_core.setup.imports``).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from as2d_core.setup import catalog
from as2d_core.setup.imports import import_checkpoint, recognized
from as2d_core.setup.plugins import load_registry

# faster-whisper's size names that as2d has a target for, by compute type
SIZES = {"base": {"float32": "whisper-base", "int8": "whisper-base-int8"}}
COMPUTE_TYPES = {"default": "float32", "auto": "float32", "float32": "float32", "int8": "int8",
                 "int8_float32": "int8"}
TARGETS = ("whisper-base", "whisper-base-int8")
INSTALL = "as2d models install whisper-base whisper-base-int8"
# faster-whisper's size names and the hub repositories it downloads them from (its ``utils._MODELS``)
FASTER_WHISPER_REPOS = {
    **{size: f"Systran/faster-whisper-{size}" for size in (
        "tiny.en", "tiny", "base.en", "base", "small.en", "small", "medium.en", "medium", "large-v1", "large-v2",
        "large-v3")},
    "large": "Systran/faster-whisper-large-v3",
    **{size: f"Systran/faster-{size.replace('distil-', 'distil-whisper-')}" for size in (
        "distil-large-v2", "distil-medium.en", "distil-small.en", "distil-large-v3")},
    "distil-large-v3.5": "distil-whisper/distil-large-v3.5-ct2",
    "large-v3-turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
    "turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
}
SIZE_OF_REPO = {repo: size for size, repo in reversed(FASTER_WHISPER_REPOS.items())}  # a repository's first size
# faster-whisper's other size names: as2d converts them from faster-whisper's download cache or a checkpoint
OTHER_SIZES = tuple(size for size in FASTER_WHISPER_REPOS if size not in SIZES)


def faster_whisper_names(target: str) -> tuple[str, ...]:
    """faster-whisper's names of the model ``target`` runs: its size and hub repository (``"base"`` and
    ``"Systran/faster-whisper-base"`` for whisper-base and whisper-base-int8; ``"small"`` and its repository for
    whisper-small made from faster-whisper's download); none for a target that is no Whisper size."""
    size = next((s for s, targets in SIZES.items() if target in targets.values()), None)
    if size is None:
        size = target.removeprefix("whisper-").removesuffix("-imported")
    return (size, FASTER_WHISPER_REPOS[size]) if size in FASTER_WHISPER_REPOS else ()


def available_models() -> list[str]:
    """The names ``WhisperModel`` takes: faster-whisper's sizes that as2d has a target for, and its targets."""
    return [*SIZES, *TARGETS]


def _installed_targets(names: Sequence[str] = TARGETS) -> list[str]:
    registry = load_registry()
    rows = (catalog.row(entry, registry) for entry in catalog.entries("target", registry))
    return [row["name"] for row in rows if row["available"] and row["name"] in names]


def unavailable(what: str) -> ValueError:
    installed = ", ".join(_installed_targets()) or "none"
    return ValueError(f"{what}; as2d runs faster-whisper's size 'base' on the CPU: compute_type 'default' or "
                      f"'float32' is whisper-base, 'int8' is whisper-base-int8 (installed here: {installed}; "
                      f"install with `{INSTALL}`), or give an as2d model folder")


def _no_weights(size: str, targets: list[str], repo: str, cache_dir: str | Path | None) -> ValueError:
    where = f"download_root {cache_dir}" if cache_dir is not None else "Hugging Face's cache (or give download_root)"
    short = size.rsplit("/", 1)[-1].removeprefix("faster-").removeprefix("whisper-")  # a repository's model name
    return ValueError(f"as2d has no Whisper {size!r} installed (targets here: {', '.join(targets) or 'none'}), "
                      f"faster-whisper's download of it ({repo}) is not in {where}, and as2d downloads nothing: get "
                      f"its weights (a faster-whisper/CTranslate2 folder, a Hugging Face Whisper folder or "
                      f"openai-whisper's {short}.pt), then run `as2d models install --from PATH --name "
                      f"whisper-{short}` and give WhisperModel('whisper-{short}'), or give WhisperModel(PATH)")


def downloaded_checkpoint(repo: str, cache_dir: str | Path | None = None, revision: str | None = None
                          ) -> Path | None:
    """The snapshot of ``repo`` that faster-whisper downloaded into a Hugging Face cache (``cache_dir``, its
    ``download_root``; None: Hugging Face's own cache), at ``revision`` (a branch, tag or commit; None: main),
    looked up on disk only; None when it is not there."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo, cache_dir=None if cache_dir is None else str(Path(cache_dir).expanduser()),
                                      revision=revision, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def _float32_only(name: str, compute_type: str) -> None:
    """Only whisper-base has an int8 target; any other model runs as converted (float32)."""
    if COMPUTE_TYPES[compute_type] != "float32" and name not in TARGETS:
        raise ValueError(f"compute_type {compute_type!r}: {name} runs in float32 (of the int8 targets as2d has only "
                         "whisper-base-int8); give compute_type='default'")


def resolve_target(model_size_or_path: str | Path, compute_type: str, cache_dir: str | Path | None = None,
                   revision: str | None = None) -> tuple[str, Path | None]:
    """The registered target (and its folder, when a path or a download is used) for faster-whisper's model and
    compute type.

    A checkpoint (a faster-whisper folder, a Hugging Face folder, an openai-whisper .pt, or the snapshot
    faster-whisper downloaded of a size or repository as2d has not installed: ``downloaded_checkpoint``) is
    converted into the models folder the first time, then reused (``as2d_core.setup.imports``)."""
    if compute_type not in COMPUTE_TYPES:
        raise unavailable(f"compute_type {compute_type!r} is not available")
    precision = COMPUTE_TYPES[compute_type]
    path = Path(model_size_or_path).expanduser()
    if path.exists() and recognized(path) is not None:
        _float32_only(path.name, compute_type)
        folder = import_checkpoint(path)
        return folder.name, folder
    targets = load_registry().names("target")
    if path.is_dir():
        meta = path / "model.json"
        if not meta.is_file():
            raise unavailable(f"{path} is not an as2d model folder (it has no model.json) nor a Whisper checkpoint")
        name = json.loads(meta.read_text()).get("name")
        if name not in targets:
            raise unavailable(f"{path} holds {name!r}, which is not a registered target")
        if name in TARGETS and compute_type not in ("default", "auto") and SIZES["base"][precision] != name:
            raise ValueError(f"{path} holds {name}; compute_type {compute_type!r} asks for "
                             f"{SIZES['base'][precision]}: give compute_type='default' or that model's folder")
        _float32_only(name, compute_type)
        return name, path
    name = str(model_size_or_path)
    name = SIZE_OF_REPO.get(name, name)  # faster-whisper's hub name of a size is that size
    if name in TARGETS:
        return name, None
    if name in SIZES:
        return SIZES[name][precision], None
    installed = next((n for n in (name, f"whisper-{name}") if n in targets), None)  # one the user converted
    if installed is not None:
        _float32_only(installed, compute_type)
        return installed, None
    if path.exists() or path.is_absolute() or name.startswith((".", "~")):  # a path, not a size or a repository
        raise ValueError(f"{model_size_or_path} is not a model folder nor a Whisper checkpoint as2d reads (a "
                         f"faster-whisper or Hugging Face folder, or openai-whisper's .pt)" if path.exists() else
                         f"no model folder at {model_size_or_path}: give an as2d model folder, a Whisper checkpoint "
                         f"(a faster-whisper or Hugging Face folder, or openai-whisper's .pt) or a size ('base')")
    repo = FASTER_WHISPER_REPOS.get(name, name if "/" in name else None)
    if repo is not None:
        snapshot = downloaded_checkpoint(repo, cache_dir, revision)
        if snapshot is None:
            raise _no_weights(name, _installed_targets(targets), repo, cache_dir)
        _float32_only(repo, compute_type)  # before converting
        folder = import_checkpoint(snapshot)
        return folder.name, folder
    raise unavailable(f"as2d has no target for the Whisper model {name!r}")


def download_model(size_or_id: str, output_dir: str | None = None, local_files_only: bool = False,
                   cache_dir: str | None = None, revision: str | None = None,
                   use_auth_token: str | bool | None = None) -> str:
    """faster-whisper's ``download_model``, answered without a network: the folder of the installed target that
    ``size_or_id`` names (a size as2d has a target for, or a target's name), or of the checkpoint faster-whisper
    downloaded into ``cache_dir`` (or Hugging Face's cache) converted, which ``WhisperModel`` takes as a path. A
    model that is in neither is refused with what to install; nothing is downloaded."""
    for name, value in (("output_dir", output_dir), ("use_auth_token", use_auth_token)):
        if value is not None:
            raise ValueError(f"{name}={value!r} is not supported: as2d downloads nothing; its models are installed "
                             f"with `{INSTALL}` into $AS2D_MODELS_DIR (or ~/.local/share/as2d/models)")
    name, folder = resolve_target(size_or_id, "default", cache_dir, revision)
    if folder is not None:
        return str(folder)
    registry = load_registry()
    row = next(catalog.row(e, registry) for e in catalog.entries("target", registry) if e.name == name)
    if not row["available"]:
        raise ValueError(f"{name} ({size_or_id!r}) is not ready here: {row['reason']}")
    return row["model_dir"]
