"""Word timestamps (issue 23): as2d's words against faster-whisper's ``word_timestamps=True``, and what they cost.

On each window of a manifest (e.g. ../shared/data/speech/windows.jsonl, English only by default), as2d transcribes
with ``word_timestamps`` and checks against target-only (words too), and faster-whisper (float32, the
same whisper-base weights, greedy, no timestamps) transcribes with ``word_timestamps=True``. Reported:

- ``own decode``: faster-whisper's words from its own whole decode (its first pass over the window;
  it then decodes again from its last word's end, which as2d's fixed windows do not), paired with
  as2d's by their text;
- ``same tokens``: faster-whisper's word timing (``add_word_timestamps``) of as2d's committed tokens,
  which isolates the method from the decode;
- the aligner pass per window (``words_s``) for as2d and for target-only (equal work: equal tokens): as
  each ran in the pipeline (as2d first, then its check), and the median of ``--repeats`` more rounds of
  both methods decoding and timing words, in alternating order (on a busy machine one sample says little).

    as2d whisper-words ../shared/data/speech/windows.jsonl --out bench-out/word_timestamps.json
    as2d whisper-words ../shared/data/speech/windows.jsonl --repeats 5 --no-faster-whisper   # the cost alone

A command of the Whisper plugin (``register_commands``): it reaches faster-whisper's internals, which no
client of the core may import.
"""
from __future__ import annotations

import difflib
import inspect
import json
import time
from pathlib import Path

import click
import numpy as np

from as2d_core.input.audio import load_audio
from as2d_core.decode.request import run_request
from as2d_core.decode.words import add_words
from as2d_core.input.pipeline import Pipeline, PipelineOptions
from as2d_core.decode.options import DecodeOptions
from as2d_core.setup.build import DEFAULT_SOURCE, DEFAULT_TARGET, build_part, build_pipeline, build_source

COST_LABELS = {"as2d_words_s": "as2d in the pipeline", "target_only_words_s": "target-only in its check",
               "as2d_words_s_rounds": "as2d over rounds", "target_only_words_s_rounds": "target-only over rounds",
               "as2d_words_cpu_s_rounds": "as2d over rounds, CPU",
               "target_only_words_cpu_s_rounds": "target-only over rounds, CPU"}


def faster_whisper_model(threads: int = 2):
    """faster-whisper on whisper-base's CTranslate2 folder (built from the PyPI packages, no download)."""
    from faster_whisper import WhisperModel

    from .peers import build_ct2_folder

    return WhisperModel(str(build_ct2_folder()), device="cpu", compute_type="float32", cpu_threads=threads)


def same_token_words(model, audio: np.ndarray, language: str, tokens: list[int]) -> list[dict]:
    """faster-whisper's word timing (``add_word_timestamps``, what ``word_timestamps=True`` runs after each
    decode) of ``tokens`` on the window, from its own features and encoder."""
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    defaults = inspect.signature(model.transcribe).parameters
    tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
    features = model.feature_extractor(audio)
    frames = features.shape[-1] - 1  # transcribe() drops the last frame
    segment = {"seek": 0, "start": 0.0, "end": frames / 100, "tokens": tokens}
    model.add_word_timestamps([[segment]], tokenizer, model.encode(pad_or_trim(features[:, :frames])), frames,
                              defaults["prepend_punctuations"].default, defaults["append_punctuations"].default, 0.0)
    return segment["words"]


def own_decode_words(model, audio: np.ndarray, language: str) -> list[dict]:
    """faster-whisper's public ``transcribe(word_timestamps=True)``, greedy and without timestamps: the words
    of its first pass over the window."""
    segments, _ = model.transcribe(audio, language=language, beam_size=1, best_of=1, temperature=0.0,
                                   without_timestamps=True, word_timestamps=True, condition_on_previous_text=False,
                                   vad_filter=False)
    return [{"word": w.word, "start": w.start, "end": w.end} for s in segments if s.seek == 0 for w in s.words]


def paired_differences(ours, theirs: list[dict]) -> tuple[list[float], list[float], int]:
    """|start| and |end| differences (s) of the words with the same text in the same place, and their count."""
    matcher = difflib.SequenceMatcher(None, [w.word for w in ours], [w["word"] for w in theirs], autojunk=False)
    starts, ends = [], []
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            a, b = ours[block.a + k], theirs[block.b + k]
            starts.append(abs(a.start_s - b["start"]))
            ends.append(abs(a.end_s - b["end"]))
    return starts, ends, len(starts)


def alternating_costs(pipeline: Pipeline, request, repeats: int) -> dict[str, float]:
    """Median wall and CPU seconds (this process, all threads) of timing the words after each method's decode,
    over ``repeats`` rounds of both methods, the order reversed every round; CPU time says what the pass costs
    on a machine others share, where the wall clock mostly says how busy it was."""
    costs: dict[str, list[float]] = {f"{m}_words_{clock}_rounds": [] for m in ("as2d", "target_only")
                                     for clock in ("s", "cpu_s")}
    threads = pipeline.options.decode.target_threads
    for round_ in range(repeats):
        for method in (("as2d", "target-only") if round_ % 2 == 0 else ("target-only", "as2d")):
            source = pipeline.source if method == "as2d" else None
            result = run_request(request, pipeline.target, source, method, pipeline.options.decode)
            cpu = time.process_time()
            add_words(pipeline.target, request, result, threads)
            name = method.replace("-", "_")
            costs[f"{name}_words_cpu_s_rounds"].append(time.process_time() - cpu)
            costs[f"{name}_words_s_rounds"].append(result.words_s)
    return {key: float(np.median(values)) for key, values in costs.items()}


def stats(values: list[float]) -> dict:
    return {"median_ms": 1000 * float(np.median(values)), "p95_ms": 1000 * float(np.percentile(values, 95)),
            "max_ms": 1000 * float(np.max(values))}


@click.command("whisper-words")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--lang", default="en", show_default=True, help="only the windows in this language ('' for all)")
@click.option("--target", default=DEFAULT_TARGET, show_default=True)
@click.option("--source", default=DEFAULT_SOURCE, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True,
              help="rounds of both methods timing words, per window")
@click.option("--faster-whisper/--no-faster-whisper", default=True, help="--no-faster-whisper: measure the cost only")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSON with every window's numbers and words")
def words_command(manifest: Path, lang: str, target: str, source: str, repeats: int, faster_whisper: bool,
                  out: Path | None) -> None:
    """Word timestamps against faster-whisper's word_timestamps=True, and what they cost (whisper-base windows)."""
    rows = [json.loads(line) for line in manifest.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not lang or r.get("lang") == lang]
    target_part, source_part = build_part("target", target), build_source(source)
    fw = faster_whisper_model() if faster_whisper else None
    windows, totals = [], {"own": ([], [], 0, 0), "same": ([], [], 0, 0)}
    for row in rows:
        audio = load_audio(manifest.parent / row["path"])
        pipeline = build_pipeline(target_part, source_part, PipelineOptions(language=row.get("lang"),
                                                                             decode=DecodeOptions(word_timestamps=True)))
        transcript = pipeline.transcribe(audio, request_id=row["id"], check=True)
        (window,) = transcript.windows
        result, reference = window.result, window.reference
        entry = {"id": row["id"], "exact": window.exact, "words_exact": result.words == reference.words,
                 "words": len(result.words), "tokens": len(result.tokens), "as2d_words_s": result.words_s,
                 "target_only_words_s": reference.words_s}
        if repeats:
            entry.update(alternating_costs(pipeline, pipeline.request(f"{row['id']}-cost", audio), repeats))
        if fw is not None:
            started = time.perf_counter()
            own = own_decode_words(fw, audio, result.language)
            entry["faster_whisper_transcribe_s"] = time.perf_counter() - started
            for name, theirs in (("own", own), ("same", same_token_words(fw, audio, result.language, result.tokens))):
                starts, ends, paired = paired_differences(result.words, theirs)
                s, e, p, n = totals[name]
                totals[name] = (s + starts, e + ends, p + paired, n + len(result.words))
                entry[name] = {"paired": paired, "theirs": len(theirs), "start": stats(starts) if starts else None,
                               "end": stats(ends) if ends else None}
            entry["faster_whisper"] = own
        entry["as2d"] = [w.as_dict() for w in result.words]
        windows.append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k not in ("as2d", "faster_whisper")}), flush=True)
    summary = {"windows": len(windows), "all_exact": all(w["exact"] and w["words_exact"] for w in windows)}
    # the aligner pass per window, median over the windows (ms): in the pipeline, and over the alternating rounds
    summary["words_ms"] = {label: 1000 * float(np.median([w[key] for w in windows]))
                           for key, label in COST_LABELS.items() if all(key in w for w in windows)}
    if fw is not None:
        for name, (starts, ends, paired, total) in totals.items():
            summary[name] = {"paired": paired, "words": total, "start": stats(starts), "end": stats(ends)}
    print(json.dumps(summary))
    if fw is not None:
        print("\n| against faster-whisper | words paired | start diff median / p95 / max (ms) | "
              "end diff median / p95 / max (ms) |\n|---|---|---|---|")
        for name, label in (("own", "its own decode"), ("same", "the same tokens")):
            s = summary[name]
            print(f"| {label} | {s['paired']} of {s['words']} | "
                  f"{s['start']['median_ms']:.0f} / {s['start']['p95_ms']:.0f} / {s['start']['max_ms']:.0f} | "
                  f"{s['end']['median_ms']:.0f} / {s['end']['p95_ms']:.0f} / {s['end']['max_ms']:.0f} |")
    print("\ntiming the words per window, median over the windows: "
          + ", ".join(f"{label} {ms:.0f} ms" for label, ms in summary["words_ms"].items())
          + f"; as2d's words equal target-only's on every window: {summary['all_exact']}")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summary, "windows": windows}, ensure_ascii=False, indent=1))

