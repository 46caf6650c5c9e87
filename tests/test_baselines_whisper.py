"""Serial baselines on real speech with the Whisper pair: exactly the target's greedy tokens.

The models must be installed (`as2d models install whisper-base whisper-tiny.en`); without them
these tests fail with that instruction rather than skip, so a missing model is never mistaken for a pass.
"""
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.decode.request import run_request
from as2d_core.setup.catalog import resolve_bridge
from conftest import speech_audio, speech_row
from drafting import options_that_draft

# the first is in the repository's speech set, the second only in the shared one
WINDOWS = ("librivox_sense_en_w01", "fleurs_en_w02")


@pytest.fixture(scope="module")
def pair(whisper_target, whisper_source):
    return whisper_target, whisper_source


def _request(window_id):
    return Request(window_id, speech_audio(window_id), language=speech_row(window_id)["lang"])


@pytest.mark.parametrize("window", WINDOWS)
def test_serial_baselines_exact_on_real_speech(pair, window):
    target, source = pair
    request = _request(window)
    ref = run_request(request, target, None, "target-only")
    assert len(ref.tokens) > 10
    for method in ("sd-k5", "sd-k8", "asp", "as2d-no-td"):
        result = run_request(request, target, source, method, DecodeOptions(budget=7))
        assert result.tokens == ref.tokens, f"{method} differs from target-only on {window}"
        assert result.accepted > 0 and result.decomposition.check()


def test_as2d_without_budget_configuration_is_exact(pair):
    """as2d-no-bc: SpecASR's confidence stop (0.4, cap 24) on decoupled drafts, through the text bridge."""
    target, source = pair
    request = _request("librivox_sense_en_w01")
    ref = run_request(request, target, None, "target-only")
    result = run_request(request, target, source, "as2d", options_that_draft(budget=24, confidence_stop=0.4),
                         bridge=resolve_bridge(source, target))
    assert result.tokens == ref.tokens
    assert result.verify_calls > 0
