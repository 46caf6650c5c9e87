import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

# The tests' routes do not depend on the profiles a user made on this machine (profile = "auto", the default, reads
# them): they look in an empty folder of their own (subprocesses inherit it); a test of the lookup sets its own.
os.environ["AS2D_PROFILES_DIR"] = tempfile.mkdtemp(prefix="as2d-test-profiles-")
atexit.register(shutil.rmtree, os.environ["AS2D_PROFILES_DIR"], ignore_errors=True)

# Real recorded speech: a small English set inside the repository (tests/data, what a fresh clone
# tests with) and, when it is beside the checkout, the full multilingual set (CI has it).
TEST_SPEECH = Path(__file__).parent / "data"
SHARED_SPEECH = Path(
    os.environ.get("AS2D_SPEECH_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "speech")
)
HAVE_SHARED = (SHARED_SPEECH / "windows.jsonl").is_file()
SHARED_ABSENT = f"needs the full real-speech set at {SHARED_SPEECH} (../shared/data/speech or $AS2D_SPEECH_DIR)"
needs_shared = pytest.mark.skipif(not HAVE_SHARED, reason=SHARED_ABSENT)

# Two runs. The README's command (and CI) runs the default set, which keeps within CI's 20 minutes; ``pytest --full``
# runs every test. What only the full run takes is marked ``full``, with a comment that says why: another option set,
# budget, row or repeat of a contract that a default test already checks on real speech (of the shared set's rows the
# default run takes every eighth), the whole tuning loop whose pieces are tested one by one, and the peers that the
# benchmarks run.
FULL_ONLY = "in the full run only (pytest --full): the comment at its mark says why"
full_only = pytest.mark.full


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run every test, the variants marked `full` too")


def pytest_configure(config):
    config.addinivalue_line("markers", "full: a test only the full run (pytest --full) takes")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    for item in items:
        if item.get_closest_marker("full"):
            item.add_marker(pytest.mark.skip(reason=FULL_ONLY))


@pytest.fixture
def full_run(request) -> bool:
    """Whether this is the full run (``--full``): a test that repeats a check to catch a rare failure repeats more."""
    return request.config.getoption("--full")


def _manifest_rows(folder: Path, manifest: str) -> list[dict]:
    lines = (folder / manifest).read_text().splitlines()
    return [dict(row, file=folder / row["path"]) for row in map(json.loads, filter(str.strip, lines))]


def speech_rows(manifest: str) -> list[dict]:
    """The repository's rows of `manifest` ("windows.jsonl" or "clips.jsonl"), then the shared set's
    rows when it is present; each row gains `file`, the audio's absolute path."""
    rows = _manifest_rows(TEST_SPEECH, manifest)
    if HAVE_SHARED:
        ours = {row["id"] for row in rows}
        rows += [row for row in _manifest_rows(SHARED_SPEECH, manifest) if row["id"] not in ours]
    return rows


def speech_params(manifest: str, keep=lambda row: True) -> list:
    """One pytest param per row that `keep` accepts; where the shared set is absent, one more param
    that is skipped and says so, so that a run on a fresh clone shows what it did not cover."""
    params = [pytest.param(row, id=row["id"]) for row in speech_rows(manifest) if keep(row)]
    if not HAVE_SHARED:
        skipped = pytest.mark.skip(reason=SHARED_ABSENT)
        params.append(pytest.param(None, id=f"shared-{manifest.removesuffix('.jsonl')}", marks=skipped))
    return params


def speech_row(item_id: str) -> dict:
    """One window or clip by id; skips the calling test when only the absent shared set has it."""
    for manifest in ("windows.jsonl", "clips.jsonl"):
        for row in speech_rows(manifest):
            if row["id"] == item_id:
                return row
    if not HAVE_SHARED:
        pytest.skip(f"{item_id}: {SHARED_ABSENT}")
    raise KeyError(f"no speech item {item_id!r} in {TEST_SPEECH} or {SHARED_SPEECH}")


def script_module(name: str):
    """``scripts/NAME.py`` imported as a module (the benchmark scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def speech_audio(item_id: str) -> np.ndarray:
    """The item's samples, read by the project's own loader (16 kHz mono float32)."""
    from as2d_core.input.audio import load_audio

    return load_audio(speech_row(item_id)["file"])


@pytest.fixture
def tiny_request():
    from as2d_core.contracts import Request

    def make(seed: int = 0):
        rng = np.random.default_rng(seed)
        return Request(request_id=f"tiny-{seed}", audio=rng.normal(0, 0.1, 1600).astype(np.float32), language="en")

    return make


WHISPER_INSTALL = "as2d models install whisper-base whisper-tiny.en whisper-base-int8 whisper-tiny.en-ct2"


def _whisper_part(kind: str, name: str, **options):
    """A registered Whisper part built as the commands build it (``setup.build.build_part``), with ``options``
    on top, or a test failure that says what to install (never a skip)."""
    from as2d_core.setup.build import build_part
    from as2d_core.setup.plugins import UnknownPart

    try:
        return build_part(kind, name, **options)
    except UnknownPart as exc:
        pytest.fail(f"{exc}: install the Whisper plugin (pip install -e ./plugins/whisper)")
    except FileNotFoundError as exc:
        pytest.fail(f"{exc}; run `{WHISPER_INSTALL}`")


# Most tests decode each clip several times (target-only, then each method or budget): these parts keep the
# last 4 clips' audio K/V so the encoder runs once per clip, which keeps the suite within CI's time. The
# ``served_*`` parts are built exactly as ``as2d run`` and the server build them (no audio cache: every decode
# runs the encoder and the feature path); the headline exactness tests use those.
CACHED = {"audio_cache": 4}


@pytest.fixture(scope="session")
def served_whisper_target():
    return _whisper_part("target", "whisper-base")


@pytest.fixture(scope="session")
def served_whisper_source():
    return _whisper_part("source", "whisper-tiny.en")


@pytest.fixture(scope="session")
def whisper_target():
    return _whisper_part("target", "whisper-base", **CACHED)


@pytest.fixture(scope="session")
def whisper_source():
    return _whisper_part("source", "whisper-tiny.en", **CACHED)


@pytest.fixture(scope="session")
def whisper_int8_target():
    return _whisper_part("target", "whisper-base-int8", **CACHED)


@pytest.fixture(scope="session")
def whisper_ct2_source():
    return _whisper_part("source", "whisper-tiny.en-ct2", **CACHED)
