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
