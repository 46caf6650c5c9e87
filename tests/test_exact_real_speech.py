"""As²d equals target-only greedy decoding on every English clip and window of the real speech, the budgets
1, 3 and 7 taken in turn, and on one window and one clip of every other language.

The repository's own speech set always runs; the shared set runs too when it is present (every eighth
row of it in the default run, all of it with ``pytest --full``). Each row runs
one budget (the rows cycle through them, so in the full run each budget meets over twenty English windows and
clips): CI's time
goes to more real speech rather than to the same row three times, and the property tests in ``test_engine.py``
cover every budget on arbitrary proposals. The drafter (tiny.en) does not serve other languages, where as2d
runs the target alone and says so; one window and one clip per language check that rule.

Runs the real Whisper models (whisper-base target, int8 tiny.en drafter in its
own thread) on ONNX Runtime, built as ``as2d run`` and the server build them (no audio cache: every
decode encodes its audio). A mismatch fails the test and names the request.
"""
import pytest

from as2d_core.decode.options import DecodeOptions
from as2d_core.contracts import Request
from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.setup.catalog import resolve_bridge
from conftest import SHARED_SPEECH, full_only, speech_params

BUDGETS = (1, 3, 7)


def _english_or_first_of_its_language(manifest: str) -> list:
    seen: set[str] = set()

    def keep(row: dict) -> bool:
        first = row["lang"] not in seen
        seen.add(row["lang"])
        return row["lang"] == "en" or first
    return speech_params(manifest, keep)


ROWS = _english_or_first_of_its_language("windows.jsonl") + _english_or_first_of_its_language("clips.jsonl")


def _marks(i: int, param) -> list:
    """The default run takes the repository's rows and every eighth row of the shared set (so the budgets still
    take turns among them, and some rows are in other languages); the full run takes them all."""
    row = param.values[0]
    shared = row is not None and row["file"].is_relative_to(SHARED_SPEECH)
    return [*param.marks, *([full_only] if shared and i % 8 else [])]


@pytest.mark.parametrize("row,budget", [pytest.param(*row.values, BUDGETS[i % len(BUDGETS)], marks=_marks(i, row),
                                                     id=f"{row.id}-b{BUDGETS[i % len(BUDGETS)]}")
                                        for i, row in enumerate(ROWS)])
def test_as2d_equals_target_only(served_whisper_target, served_whisper_source, row, budget):
    target, source = served_whisper_target, served_whisper_source
    request = Request(row["id"], load_audio(row["file"]))
    reference = run_request(request, target, None, "target-only")
    assert reference.tokens, f"{row['id']}: the target produced no tokens"
    result = run_request(request, target, source, "as2d", DecodeOptions(budget=budget),
                         bridge=resolve_bridge(source, target))
    assert result.tokens == reference.tokens, (
        f"{row['id']} budget {budget}: as2d {result.text!r} != target-only {reference.text!r}"
    )
    assert result.producer_error is None
    if reference.language == "en":
        # drafted from arrival; on a few-token window the target may finish before the drafter has
        # published, so only the drafter's presence is required per window
        assert result.source == source.name and result.start == "arrival"
    else:
        assert result.verify_calls == 0 and "does not draft" in result.note
