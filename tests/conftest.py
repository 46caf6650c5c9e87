import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Real recorded speech lives beside the checkout (../shared), never inside the repository.
SHARED_SPEECH = Path(
    os.environ.get("AS2D_SPEECH_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data" / "speech")
)


@pytest.fixture
def tiny_request():
    from as2d_core import Request

    def make(seed: int = 0):
        rng = np.random.default_rng(seed)
        return Request(request_id=f"tiny-{seed}", audio=rng.normal(0, 0.1, 1600).astype(np.float32), language="en")

    return make


WHISPER_INSTALL = "as2d models install whisper-base whisper-tiny.en whisper-base-int8 whisper-tiny.en-ct2"


def _whisper_part(kind: str, name: str):
    """A registered Whisper part, or a test failure that says what to install (never a skip)."""
    from as2d_core.paths import models_dir
    from as2d_core.plugins import UnknownPart, load_registry

    try:
        factory = load_registry().get(kind, name).factory
    except UnknownPart as exc:
        pytest.fail(f"{exc}: install the Whisper plugin (pip install -e ./plugins/whisper)")
    try:
        # reuse each clip's audio K/V across the several decodes a test makes of it
        return factory({"models_dir": models_dir(), "audio_cache": 4})
    except FileNotFoundError as exc:
        pytest.fail(f"{exc}; run `{WHISPER_INSTALL}`")


@pytest.fixture(scope="session")
def whisper_target():
    return _whisper_part("target", "whisper-base")


@pytest.fixture(scope="session")
def whisper_source():
    return _whisper_part("source", "whisper-tiny.en")


@pytest.fixture(scope="session")
def whisper_int8_target():
    return _whisper_part("target", "whisper-base-int8")


@pytest.fixture(scope="session")
def whisper_ct2_source():
    return _whisper_part("source", "whisper-tiny.en-ct2")
