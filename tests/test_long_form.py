"""Whisper's long-form rules (seek, temperature fallback, seeded sampling): exact against target-only in every mode."""
import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from as2d_core.contracts import Request
from as2d_core.decode.beam import NoRows
from as2d_core.decode.best_of import run_samples_request
from as2d_core.decode.fallback import Attempt, decode_with_fallback, needs_fallback
from as2d_core.decode.options import DecodeOptions
from as2d_core.decode.request import run_request
from as2d_core.decode.result import DecodeResult
from as2d_core.decode.sampling import Sampling
from as2d_core.capabilities import Word
from as2d_core.decode.timestamps import Segment, split_segments
from as2d_core.input.hallucinations import Cut, hallucination_cut, is_anomaly
from as2d_core.input.pipeline import PipelineOptions
from as2d_core.setup.build import build_pipeline
from as2d_core.input.seek import HOP, kept_segments, seek_steps
from as2d_core.input.sequential import long_form_steps
from conftest import full_only, speech_audio
from drafting import options_that_draft
from tiny_lm import ScriptedSource, TinyLM, TinySession, edited_draft

MODEL = TinyLM(timestamps=160, max_new_tokens=40)
BEGIN = MODEL.rules.begin


def _audio(seed: int, seconds: float) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.1, int(seconds * 16_000)).astype(np.float32)


def test_sampling_is_a_function_of_logits_seed_and_position():
    rows = np.random.default_rng(0).normal(0, 2, (5, 50))
    hot = Sampling(1.0, seed=3)
    alone = [hot.choose(rows[j : j + 1], 7 + j)[0] for j in range(5)]
    assert hot.choose(rows, 7) == alone  # one batched call draws what single steps draw
    assert Sampling(0.0).choose(rows, 7) == list(rows.argmax(-1))
    draws = {tuple(Sampling(1.0, seed=s).choose(rows, 0)) for s in range(20)}
    assert len(draws) > 1  # other seeds draw other tokens
    with pytest.raises(ValueError):
        Request("x", np.ones(160, np.float32), temperature=-0.1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 50), temperature=st.sampled_from([0.0, 0.3, 1.0, 2.5]), sample_seed=st.integers(0, 2**31),
       edits=st.lists(st.tuples(st.sampled_from(["keep", "sub", "ins", "del", "junk"]), st.integers(0, 31)),
                      max_size=40),
       budget=st.integers(1, 12), timestamps=st.booleans())
def test_any_proposals_at_any_temperature_give_target_output(tiny_request, seed, temperature, sample_seed, edits,
                                                             budget, timestamps):
    request = attrs.evolve(tiny_request(seed), temperature=temperature, seed=sample_seed,
                           timestamps="segment" if timestamps else "none")
    reference = run_request(request, MODEL, None, "target-only").tokens
    drafted, _ = edited_draft(reference, edits)
    result = run_request(request, MODEL, ScriptedSource(drafted), "as2d", DecodeOptions(budget=budget))
    assert result.tokens == reference


def _result(tokens, text="", avg_logprob=-0.2, no_speech_prob=0.1, duration_s=30.0) -> DecodeResult:
    segments = split_segments(tokens, BEGIN, lambda ts: " ".join(f"t{t}" for t in ts if t < BEGIN), duration_s)
    return DecodeResult("r", "target-only", "en", list(tokens), text, 0.0, 0.0, segments=segments,
                        avg_logprob=avg_logprob, no_speech_prob=no_speech_prob, timestamp_ids=(BEGIN, MODEL.eos_token))


def test_kept_segments_follow_faster_whisper():
    t = lambda seconds: BEGIN + round(seconds / 0.02)  # noqa: E731
    # a complete pair inside and an unfinished segment after it: that segment is left for the next request
    kept, advance = kept_segments(_result([t(0), 5, t(1), t(1), 6, 7]), 3000)
    assert [s.tokens for s in kept] == [(t(0), 5, t(1))] and advance == 100
    # ending on a single timestamp: everything kept, the seek moves a whole segment
    kept, advance = kept_segments(_result([t(0), 5, t(1), t(1), 6, t(2)]), 3000)
    assert len(kept) == 2 and advance == 3000
    # an early end on a repeated timestamp: the seek moves to it, so what follows is decoded again
    kept, advance = kept_segments(_result([t(0), 5, t(1.5), t(1.5)]), 3000)
    assert len(kept) == 1 and advance == 150
    # no complete pair: all kept, as one segment from the request's start to the last timestamp, or to the request's
    # end if there is none past 0 (faster-whisper's, whatever timestamp opened it)
    kept, advance = kept_segments(_result([t(0), 5, 6], text="t5t6"), 2000)
    assert [(s.start_s, s.end_s, s.tokens) for s in kept] == [(0.0, 20.0, (t(0), 5, 6))] and advance == 2000
    kept, advance = kept_segments(_result([t(1), 5, 6, t(14)], text="t5t6"), 2000)
    assert [(s.start_s, s.end_s, s.text) for s in kept] == [(0.0, 14.0, "t5t6")] and advance == 2000
    kept, advance = kept_segments(_result([t(1), 5, t(3), 6], text="t5t6"), 3000)
    assert [(s.start_s, s.end_s, s.tokens) for s in kept] == [(0.0, 3.0, (t(1), 5, t(3), 6))] and advance == 3000
    assert kept_segments(_result([t(1)], text=""), 3000) == ([], 3000)


def test_a_segment_that_starts_where_it_ends_is_dropped_as_faster_whisper_drops_it():
    """faster-whisper neither gives a segment whose start equals its end nor feeds it to the next prompt: by its
    timestamp tokens, or with word timestamps by its fitted times; its words go with it."""
    from as2d_core.capabilities import Word
    from as2d_core.input.seek import without_empty_segments

    t = lambda seconds: BEGIN + round(seconds / 0.02)  # noqa: E731
    result = _result([t(0), 5, t(1), t(1), 6, t(1), t(2), 7, t(3)])
    kept, segments = without_empty_segments(result, list(result.segments), timed=False)
    assert [s.tokens for s in segments] == [s.tokens for s in kept.segments] == [(t(0), 5, t(1)), (t(2), 7, t(3))]
    assert kept.text == "t5t7" and without_empty_segments(kept, segments, timed=False)[0] is kept

    timed = attrs.evolve(result, segments=[attrs.evolve(s, start_s=x, end_s=y) for s, (x, y) in
                                           zip(result.segments, [(0.1, 0.9), (1.5, 1.6), (2.2, 2.2)])],
                         words=[Word(" t5", 0.1, 0.9, 1.0), Word(" t6", 1.5, 1.6, 1.0), Word(" t7", 2.2, 2.2, 1.0)])
    kept, segments = without_empty_segments(timed, list(result.segments), timed=True)
    assert [s.tokens for s in segments] == [(t(0), 5, t(1)), (t(1), 6, t(1))]  # the prompt keeps what is given
    assert [w.word for w in kept.words] == [" t5", " t6"] and [s.end_s for s in kept.segments] == [0.9, 1.6]


def test_fallback_follows_faster_whisper_rules():
    mode = DecodeOptions(temperature=(0.0, 0.5, 1.0), best_of=2)
    tried = []

    def decode(request):
        tried.append((request.temperature, request.seed))
        unsure = request.temperature < 1.0  # unsure until the hottest try
        return _result([], text="a b c", avg_logprob=-2.0 if unsure else -0.5 - request.seed % 7 / 100)

    kept, attempts = decode_with_fallback(Request("x", _audio(0, 1)), decode, mode, key=0)
    assert [a.temperature for a in attempts] == [0.0, 0.5, 1.0] and kept.temperature == 1.0
    assert [t for t, _ in tried] == [0.0, 0.5, 0.5, 1.0, 1.0]  # best_of samples above 0
    assert len({s for t, s in tried if t > 0}) == 4  # each sample its own noise
    # every temperature unsure: the likeliest result is kept, with the last temperature (faster-whisper's, for the
    # segments and the prompt reset)
    unsure = lambda request: _result([], text="a b c", avg_logprob=-2.0 - request.temperature)  # noqa: E731
    kept, attempts = decode_with_fallback(Request("x", _audio(0, 1)), unsure, mode, key=0)
    assert kept.result is attempts[0].result and kept.temperature == 1.0
    # silence (no-speech probability over its threshold while unsure) ends the fallback
    silent = Attempt(_result([], avg_logprob=-2.0, no_speech_prob=0.9), 0.0, 1.0)
    assert not needs_fallback(silent, mode)
    assert needs_fallback(Attempt(_result([]), 0.0, 3.0), mode)  # too repetitive


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 50), temperature=st.sampled_from([0.2, 0.6, 1.0, 2.5]),
       seeds=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5), timestamps=st.booleans(),
       prefix=st.booleans())
def test_samples_side_by_side_are_each_seeds_own_decode(tiny_request, seed, temperature, seeds, timestamps, prefix):
    """The fallback's ``best_of`` samples in one call a step: each row's tokens and scores are those of the request
    decoded alone with its seed (rows that end early wait while the others go on)."""
    request = attrs.evolve(tiny_request(seed), temperature=temperature, scores=True,
                           timestamps="segment" if timestamps else "none")
    calls = MODEL.calls
    together = run_samples_request(request, MODEL, seeds)
    steps = MODEL.calls - calls
    alone = [run_request(attrs.evolve(request, seed=s), MODEL, None, "target-only") for s in seeds]
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    assert [r.avg_logprob for r in together] == pytest.approx([r.avg_logprob for r in alone], rel=1e-12, nan_ok=True)
    assert [r.no_speech_prob for r in together] == [r.no_speech_prob for r in alone]
    assert [r.text for r in together] == [r.text for r in alone]
    assert [r.segments for r in together] == [r.segments for r in alone]
    # one call a step for all rows, not one a row: a row calls after each token, but for one at the limit
    assert steps == max(len(r.tokens) - (len(r.tokens) == MODEL.max_new_tokens) for r in alone)


def test_samples_side_by_side_refuse_greedy_and_a_target_without_rows(tiny_request):
    with pytest.raises(ValueError, match="above temperature 0"):
        run_samples_request(tiny_request(0), MODEL, [1, 2])

    class NoRowsSession(TinySession):
        beam_rows = None  # not callable: no rows

    class NoRowsTarget(TinyLM):
        def prepare(self, request, threads):
            session = super().prepare(request, threads)
            session.__class__ = NoRowsSession
            return session

    hot = attrs.evolve(tiny_request(0), temperature=0.5, scores=True)
    with pytest.raises(NoRows):
        run_samples_request(hot, NoRowsTarget(), [1, 2])
    # the pipeline then samples one by one, as before: the same results
    target = NoRowsTarget(timestamps=160, max_new_tokens=40)  # MODEL's weights
    pipeline = build_pipeline(target, None, PipelineOptions(method="target-only"), detector=None)
    assert [r.tokens for r in pipeline.decode_samples(hot, [1, 2])] == \
        [r.tokens for r in run_samples_request(hot, MODEL, [1, 2])]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 1000), temperatures=st.sampled_from(["0", "0,0.4,1.0", "0.7"]),
       best_of=st.integers(1, 3), threshold=st.sampled_from([-0.5, -1.5, None]),
       condition=st.booleans(), drafted=st.lists(st.integers(2, 40), max_size=60), budget=st.integers(1, 9),
       clips=st.sampled_from(["", "0.5,2.2,3", "1,4.5,0.2,2"]))
def test_long_form_is_exact_for_any_proposals_and_mode(seed, temperatures, best_of, threshold, condition, drafted,
                                                       budget, clips):
    mode = DecodeOptions(temperature=temperatures, best_of=best_of, log_prob_threshold=threshold, seed=seed,
                         condition_on_previous_text=condition, budget=budget, clip_timestamps=clips)
    pipeline = build_pipeline(MODEL, ScriptedSource(drafted + [BEGIN + 3]), PipelineOptions(decode=mode, lookahead=False),
                        detector=None)
    transcript = pipeline.transcribe(_audio(seed, 5.0), check=True)
    assert transcript.exact is True and not transcript.notes
    starts = [w.window.start_s for w in transcript.windows]
    clip_starts = [float(t) for t in clips.split(",")[::2]] if clips else [0.0]
    assert set(clip_starts) <= set(starts) and all(  # each clip walked from its start, within it
        any(a <= t < b for a, b in zip(clip_starts, [*map(float, clips.split(",")[1::2]), 5.0]))
        for t in starts) if clips else starts[0] == 0.0


def test_a_request_cut_short_is_decoded_again_from_its_last_timestamp():
    """The tiny model's responses end without the end token (its limit) or on a repeated timestamp: the seek then
    moves to the last complete timestamp pair, and the next request starts there."""
    mode = DecodeOptions(temperature=0.0)
    audio = _audio(3, 12.0)

    def make(window, previous, first):
        return Request(f"s{window.index}", audio[window.start : window.end], timestamps="segment",
                       previous_text=previous)

    steps = list(seek_steps(audio, make, lambda r: run_request(r, MODEL, None, "target-only"), mode, MODEL.vocabulary))
    moved = 0
    for step, following in zip(steps, steps[1:]):
        tokens = step.attempt.result.tokens
        pairs = [i for i in range(1, len(tokens)) if tokens[i] >= BEGIN and tokens[i - 1] >= BEGIN]
        single = len(tokens) >= 2 and tokens[-2] < BEGIN <= tokens[-1]
        if pairs and not single:
            last = tokens[pairs[-1] - 1] - BEGIN
            assert following.window.start == step.window.start + last * 2 * HOP
            moved += 1
    assert moved > 0 and steps[-1].window.end == audio.size


@pytest.fixture(scope="module")
def bundled_recording():
    """Over 30 s of real speech from the bundled clips, so the seek crosses a request boundary."""
    ids = ["librivox_sense_0870", "librivox_sense_0880", "librivox_sense_0890", "librivox_sense_0920",
           "librivox_sense_0930", "cmu_cards_005", "librivox_sense_0870"]
    gap = np.zeros(8000, np.float32)
    return np.concatenate([piece for i in ids for piece in (speech_audio(i), gap)])


@pytest.mark.parametrize("fields", [
    {"temperature": "0"},  # greedy with seek
    {"temperature": "0,0.6", "log_prob_threshold": 0.0, "best_of": 2},  # every request falls back: seeded sampling
    {"condition_on_previous_text": True},  # conditioning on the text before, with the default fallback
    {"temperature": "0", "beam_size": 3},  # beam search, its seek following its timestamps too
    # clips, the text carried across them; responses cut short, fed back as decoded (the full run's: test_whisper_model
    # checks both options against faster-whisper on these clips in the default run)
    pytest.param({"condition_on_previous_text": True, "clip_timestamps": "1,25,27"}, marks=full_only),
    pytest.param({"condition_on_previous_text": True, "max_new_tokens": 20}, marks=full_only),
], ids=["greedy", "sampling", "conditioned", "beams", "clips", "cut"])
def test_real_speech_long_form_is_exact_in_every_mode(served_whisper_target, served_whisper_source, bundled_recording,
                                                     fields):
    """Every mode on the parts as the commands build them (no audio cache)."""
    pipeline = build_pipeline(served_whisper_target, served_whisper_source,
                              PipelineOptions(language="en", decode=options_that_draft(**fields)))
    transcript = pipeline.transcribe(bundled_recording, request_id="long", check=True)
    assert transcript.exact is True and not transcript.notes
    assert len(transcript.windows) >= 2
    if "clip_timestamps" in fields:
        starts = [w.window.start_s for w in transcript.windows]
        assert starts[0] == 1.0 and 27.0 in starts and all(1 <= t < 25 or t >= 27 for t in starts)
        assert transcript.skipped[:2] == ((0.0, 1.0), (25.0, 27.0))
    if "max_new_tokens" in fields:  # the first: half of its 3-token start and 20; the others at most one past 20
        assert len(transcript.windows[0].result.tokens) <= 11
        assert all(len(w.result.tokens) <= 21 for w in transcript.windows)
    else:
        assert transcript.windows[1].window.start < 30 * 16_000  # seek, not fixed cuts
        assert "dashwood" in transcript.text.lower() and "disposed" in transcript.text.lower()
    if "log_prob_threshold" in fields:
        assert all(w.attempts == 2 for w in transcript.windows)  # the sampled attempts are checked too
        # the greedy attempts are drafted; each temperature's samples run side by side on the target alone, the same
        # for both runs (their tokens against each seed's own decode: the test below)
        assert sum(w.result.accepted for w in transcript.windows) > 0


@pytest.mark.parametrize("multilingual", [False, True])
def test_a_file_without_a_language_keeps_the_first_requests_as_faster_whisper_does(served_whisper_target,
                                                                                    bundled_recording, multilingual):
    """faster-whisper reads the language once, from the first 30 s, unless ``multilingual``: the first request
    detects it, and every later request names it (or, multilingual, detects its own)."""
    pipeline = build_pipeline(served_whisper_target, None,
                              PipelineOptions(method="target-only", decode=DecodeOptions(multilingual=multilingual)))
    asked: dict[str, set[str | None]] = {}  # each request's languages, over its attempts

    def decode(request: Request) -> DecodeResult:
        asked.setdefault(request.request_id, set()).add(request.language)
        return pipeline.reference(request, words=False)

    steps = list(long_form_steps(pipeline, bundled_recording, "long", pipeline.options.decode, decode))
    assert len(steps) >= 2 and [s.result.language for s in steps] == ["en"] * len(steps)
    later = {None} if multilingual else {"en"}
    assert list(asked.values()) == [{None}] + [later] * (len(steps) - 1)


@full_only  # two files of 44 s each way (the default run checks each request's language above)
def test_a_file_in_two_languages_gives_faster_whispers_words_with_and_without_multilingual(served_whisper_target):
    """English, then German after 26 s: as faster-whisper, the German is transcribed as English (the language read
    once), and with ``multilingual`` as German; the same words as faster-whisper's either way."""
    pytest.importorskip("faster_whisper", reason="compares with faster-whisper: pip install 'as2d[bench]'")
    from as2d_whisper import word_check

    audio = np.concatenate([speech_audio("ljspeech_en_w00"), np.zeros(8000, np.float32), speech_audio("fleurs_de_w00")])
    for multilingual, second in ((False, "en"), (True, "de")):
        pipeline = build_pipeline(served_whisper_target, None, PipelineOptions(
            method="target-only", decode=DecodeOptions(multilingual=multilingual)))
        ours = pipeline.transcribe(audio, request_id="two")
        theirs, _ = word_check.faster_whisper_model().transcribe(audio, beam_size=1, multilingual=multilingual,
                                                                 condition_on_previous_text=False)
        assert ours.text.split() == " ".join(s.text for s in theirs).split(), multilingual
        assert [w.result.language for w in ours.windows] == ["en", second]


def test_real_speech_samples_side_by_side_are_each_seeds_own_decode(served_whisper_target):
    """whisper-base's rows (its windows graph) sample the tokens each seed's decode alone samples; the scores agree
    to float32's rounding (another graph's arithmetic)."""
    request = Request("hot", speech_audio("librivox_sense_0870"), language="en", timestamps="segment", scores=True,
                      temperature=0.6)
    seeds = [3, 5, 8]
    together = run_samples_request(request, served_whisper_target, seeds)
    alone = [run_request(attrs.evolve(request, seed=s), served_whisper_target, None, "target-only") for s in seeds]
    assert [r.tokens for r in together] == [r.tokens for r in alone]
    assert len({tuple(r.tokens) for r in alone}) > 1  # the seeds drew other responses
    assert [r.avg_logprob for r in together] == pytest.approx([r.avg_logprob for r in alone], abs=1e-5)
    assert [r.no_speech_prob for r in together] == [r.no_speech_prob for r in alone]


def test_hallucination_cut_follows_faster_whispers_rules():
    """The rule on timed words (seconds from the request's start at frame 1000): an improbable first segment after a
    gap over the threshold drops the request and seeks past the gap; one surrounded by silence is cut with what
    follows, the seek moving to it; words that look right are kept."""
    def words(start, count, probability, length=0.3):
        return [Word(f" w{i}", start + i * length, start + (i + 1) * length, probability) for i in range(count)]

    def segment(group):
        return Segment(group[0].start_s, group[-1].end_s, "".join(w.word for w in group), ())

    sure, unsure = words(0.5, 4, 0.9), words(12.0, 3, 0.05)
    late_unsure = words(5.0, 3, 0.05)
    assert not is_anomaly(sure) and is_anomaly(unsure) and not is_anomaly([])
    args = dict(seek=1000, size=3000, last_speech_s=10.0, threshold=2.0, content_frames=9000, reach_s=30.0)
    assert hallucination_cut([segment(sure)], [sure], **args) is None
    assert hallucination_cut([segment(late_unsure)], [late_unsure], **args) == Cut(0, 1500, whole=True)
    early = words(1.5, 3, 0.05)  # its gap is within the threshold, but a request's first 2 s count as silence
    assert hallucination_cut([segment(early)], [early], **args) == Cut(0, 1150)
    cut = hallucination_cut([segment(sure), segment(unsure)], [sure, unsure], **args)
    assert cut == Cut(1, 1000 + 1200)  # silence before (10.7 s gap) and after (its request's end): cut at its start
    near_end = hallucination_cut([segment(sure), segment(unsure)], [sure, unsure], **{**args, "content_frames": 2400})
    assert near_end == Cut(1, 2400)  # under the threshold from the audio's end: nothing more is decoded
    short = {**args, "size": 1350}  # the request's audio ends 0.6 s after the unsure words: not silence after them
    assert hallucination_cut([segment(sure), segment(unsure)], [sure, unsure], **short) is None
    # ... unless the request reaches no further (a chunk_length of 14 s ends within 2 s of them)
    reached = hallucination_cut([segment(sure), segment(unsure)], [sure, unsure], **{**short, "reach_s": 14.0})
    assert reached == Cut(1, 2200)
