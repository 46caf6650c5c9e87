"""SenseVoice Small from a local funasr-onnx folder, drafting chunk by chunk.

Folder: ``model.onnx`` (inputs, in order: speech float [B, T, 560], speech
lengths int32 [B], language int32 [B], text-norm int32 [B]; outputs ctc_logits
[B, T', V] and encoder_out_lens [B], blank 0), ``config.yaml`` with
``frontend_conf``, ``am.mvn`` (Kaldi CMVN) and the sentencepiece model
``chn_jpn_yue_eng_ko_spectok.bpe.model``. The front end is funasr-onnx's: Kaldi
fbank (kaldi-native-fbank) on 16-bit-scaled samples, low frame rate stacking
(7 frames every 6) and CMVN. The model's four leading tags (language, emotion,
event, text norm) are dropped, never published. ``use_itn`` asks for
punctuated, cased text, closer to what Whisper-style targets emit.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from as2d_core.decode.chunked import DEFAULT_CHUNK_S, ChunkedSource, ctc_greedy, sentencepiece_text
from as2d_core.setup.paths import check_folder
from as2d_onnxruntime.sessions import OrtSessions

BPE_MODEL = "chn_jpn_yue_eng_ko_spectok.bpe.model"
REQUIRED_FILES = ("model.onnx", "config.yaml", "am.mvn", BPE_MODEL)
LAYOUT = (
    f"the funasr-onnx SenseVoiceSmall folder: model.onnx, config.yaml (with frontend_conf), am.mvn, {BPE_MODEL}; "
    "from the PyTorch checkpoint, export it with funasr (`pip install './plugins/sensevoice[funasr]'`)"
)
LANGUAGE_IDS = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
TEXTNORM_IDS = {True: 14, False: 15}  # withitn, woitn
BLANK = 0
TAG = re.compile(r"^<\|.*\|>$")


def read_cmvn(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The shift and scale vectors of a Kaldi nnet-format ``am.mvn``."""
    lines = path.read_text().splitlines()
    values = {}
    for i, line in enumerate(lines[:-1]):
        head = line.split()
        following = lines[i + 1].split()
        if head and head[0] in ("<AddShift>", "<Rescale>") and following and following[0] == "<LearnRateCoef>":
            values[head[0]] = np.array(following[3:-1], np.float32)
    if set(values) != {"<AddShift>", "<Rescale>"}:
        raise ValueError(f"{path}: expected <AddShift> and <Rescale> blocks of a Kaldi CMVN file")
    return values["<AddShift>"], values["<Rescale>"]


LANGUAGES = ("zh", "en", "yue", "ja", "ko")  # what it transcribes (its language tokens), in its own order


class Frontend:
    """funasr-onnx's WavFrontend: fbank, LFR stacking, CMVN."""

    def __init__(self, conf: dict, cmvn: tuple[np.ndarray, np.ndarray]) -> None:
        import kaldi_native_fbank as knf

        opts = knf.FbankOptions()
        opts.frame_opts.samp_freq = float(conf.get("fs", 16000))
        opts.frame_opts.dither = 0.0
        opts.frame_opts.window_type = conf.get("window", "hamming")
        opts.frame_opts.frame_shift_ms = float(conf.get("frame_shift", 10))
        opts.frame_opts.frame_length_ms = float(conf.get("frame_length", 25))
        opts.frame_opts.snip_edges = True
        opts.mel_opts.num_bins = int(conf.get("n_mels", 80))
        opts.energy_floor = 0.0
        self.opts, self.knf = opts, knf
        self.lfr_m, self.lfr_n = int(conf.get("lfr_m", 7)), int(conf.get("lfr_n", 6))
        self.shift, self.scale = cmvn

    def __call__(self, samples: np.ndarray) -> np.ndarray:
        fbank = self.knf.OnlineFbank(self.opts)
        fbank.accept_waveform(self.opts.frame_opts.samp_freq, (np.asarray(samples, np.float32) * 32768).tolist())
        fbank.input_finished()
        frames = np.array([fbank.get_frame(i) for i in range(fbank.num_frames_ready)], np.float32)
        if frames.size == 0:
            frames = np.zeros((1, self.opts.mel_opts.num_bins), np.float32)
        return (self._lfr(frames) + self.shift) * self.scale

    def _lfr(self, frames: np.ndarray) -> np.ndarray:
        m, n = self.lfr_m, self.lfr_n
        count = int(np.ceil(frames.shape[0] / n))
        padded = np.vstack([np.repeat(frames[:1], (m - 1) // 2, axis=0), frames])
        needed = (count - 1) * n + m
        if padded.shape[0] < needed:  # the last stacked frame repeats the final frame
            padded = np.vstack([padded, np.repeat(padded[-1:], needed - padded.shape[0], axis=0)])
        return np.stack([padded[i * n : i * n + m].reshape(-1) for i in range(count)]).astype(np.float32)


class SenseVoiceSource(ChunkedSource):
    """SenseVoice Small drafter for zh, en, yue, ja and ko; one ONNX call per 2.56 s chunk."""

    name = "sensevoice-small"
    vocabulary = "sensevoice-bpe"
    languages = frozenset(LANGUAGES)

    def __init__(self, model_dir: str | Path, device: str = "auto", use_itn: bool = True,
                 chunk_s: float = DEFAULT_CHUNK_S, pad_last: bool = False) -> None:
        import sentencepiece
        import yaml

        self.dir = Path(model_dir)
        check_folder(self.dir, REQUIRED_FILES, LAYOUT, "SenseVoice")
        config = yaml.safe_load((self.dir / "config.yaml").read_text()) or {}
        if "frontend_conf" not in config:
            raise ValueError(f"{self.dir / 'config.yaml'} has no frontend_conf")
        self.frontend = Frontend(config["frontend_conf"], read_cmvn(self.dir / "am.mvn"))
        self.sp = sentencepiece.SentencePieceProcessor(model_file=str(self.dir / BPE_MODEL))
        self.pieces = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.hidden = {i for i, p in enumerate(self.pieces) if TAG.match(p)} | {BLANK}
        self.use_itn = use_itn
        self.device = device
        self.chunk_s, self.pad_last = chunk_s, pad_last
        self._sessions = OrtSessions(self.dir / "model.onnx", device)
        session, self.device_note = self._sessions.get(1)
        # the graph's input names are the same in every thread count's session: read once, not per chunk
        self._input_names = [i.name for i in session.get_inputs()]

    @property
    def device_in_use(self) -> list[str]:
        return self._sessions.device_in_use

    def logits(self, samples: np.ndarray, language: str = "auto", threads: int = 1) -> np.ndarray:
        """CTC logits of one chunk (valid frames only, the four tag frames first)."""
        features = self.frontend(samples)
        session = self._sessions.get(threads)[0]
        feeds = [
            features[None],
            np.array([features.shape[0]], np.int32),
            np.array([LANGUAGE_IDS.get(language, 0)], np.int32),
            np.array([TEXTNORM_IDS[self.use_itn]], np.int32),
        ]
        logits, lengths = session.run(None, dict(zip(self._input_names, feeds)))[:2]
        return logits[0, : int(lengths[0])]

    def transcribe_chunk(self, samples: np.ndarray, language: str = "auto", threads: int = 1) -> list[int]:
        return [t for t in ctc_greedy(self.logits(samples, language, threads), BLANK) if t not in self.hidden]

    def decode_text(self, tokens: Sequence[int]) -> str:
        return sentencepiece_text([self.pieces[t] for t in tokens])
