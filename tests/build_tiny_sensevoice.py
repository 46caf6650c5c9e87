"""Build a tiny random-weight SenseVoice Small folder in the real funasr-onnx layout (for tests).

model.onnx takes (speech float [B, T, 560], speech_lengths int32 [B], language
int32 [B], textnorm int32 [B]) and returns (ctc_logits [B, 4+T, V],
encoder_out_lens [B]) like the funasr export: four tag frames (language,
emotion, event, text norm) come first, blank is id 0. The sentencepiece BPE
model carries the ``<|..|>`` tags as user-defined pieces; config.yaml holds
frontend_conf; am.mvn is a Kaldi CMVN file. Seeded, small.

    python tests/build_tiny_sensevoice.py OUT_DIR
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
import yaml

BPE_MODEL = "chn_jpn_yue_eng_ko_spectok.bpe.model"
TAGS = ["<|zh|>", "<|en|>", "<|yue|>", "<|ja|>", "<|ko|>", "<|nospeech|>", "<|NEUTRAL|>", "<|Speech|>",
        "<|withitn|>", "<|woitn|>"]
QUERY_IDS = {0: "<|nospeech|>", 3: "<|zh|>", 4: "<|en|>", 7: "<|yue|>", 11: "<|ja|>", 12: "<|ko|>", 13: "<|nospeech|>",
             14: "<|withitn|>", 15: "<|woitn|>"}
WORDS = ("the of and to in he was it that for on with his at by had not be this but from they she which "
         "we are you my your country what can do ask fellow americans so").split()
FRONTEND = {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10, "lfr_m": 7,
            "lfr_n": 6}


class TinySenseVoice(torch.nn.Module):
    """Tag frames chosen by the language / text-norm queries, then a random CTC head over the speech frames."""

    def __init__(self, vocab: int, tag_ids: list[int], query_to_token: torch.Tensor, hidden: int = 64):
        super().__init__()
        self.proj = torch.nn.Linear(560, hidden)
        self.head = torch.nn.Linear(hidden, vocab)
        self.register_buffer("query_to_token", query_to_token)
        self.vocab = vocab
        self.emo, self.event = tag_ids

    def forward(self, speech, speech_lengths, language, textnorm):
        frames = torch.arange(speech.shape[1])[None, :, None] < speech_lengths[:, None, None]
        logits = self.head(torch.relu(self.proj(speech * frames.to(speech.dtype))))
        batch = speech.shape[0]
        tags = torch.stack([
            self.query_to_token[language.long()],
            torch.full((batch,), self.emo, dtype=torch.long),
            torch.full((batch,), self.event, dtype=torch.long),
            self.query_to_token[textnorm.long()],
        ], dim=1)
        tag_logits = torch.nn.functional.one_hot(tags, self.vocab).to(speech.dtype) * 30.0
        return torch.cat([tag_logits, logits], dim=1), speech_lengths + 4


def build(out_dir: str | Path, seed: int = 0) -> Path:
    import sentencepiece

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)))
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out / BPE_MODEL[: -len(".model")]), vocab_size=120, model_type="bpe",
        user_defined_symbols=TAGS, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1, character_coverage=1.0,
        minloglevel=2, num_threads=1,
    )
    corpus.unlink()
    (out / (BPE_MODEL[: -len(".model")] + ".vocab")).unlink()
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out / BPE_MODEL))
    table = torch.zeros(16, dtype=torch.long)
    for query, tag in QUERY_IDS.items():
        table[query] = sp.piece_to_id(tag)
    torch.manual_seed(seed)
    model = TinySenseVoice(sp.get_piece_size(), [sp.piece_to_id("<|NEUTRAL|>"), sp.piece_to_id("<|Speech|>")], table)
    model.eval()
    with torch.no_grad():
        model.head.bias[0] = -0.5  # blank
    example = (torch.randn(1, 40, 560), torch.tensor([40], dtype=torch.int32), torch.tensor([0], dtype=torch.int32),
               torch.tensor([15], dtype=torch.int32))
    torch.onnx.export(
        model, example, str(out / "model.onnx"), input_names=["speech", "speech_lengths", "language", "textnorm"],
        output_names=["ctc_logits", "encoder_out_lens"],
        dynamic_axes={"speech": {0: "B", 1: "T"}, "speech_lengths": {0: "B"}, "language": {0: "B"},
                      "textnorm": {0: "B"}, "ctc_logits": {0: "B", 1: "T_out"}, "encoder_out_lens": {0: "B"}},
        opset_version=17, dynamo=False,
    )
    config = {"model": "SenseVoiceSmall", "frontend": "WavFrontend", "frontend_conf": FRONTEND,
              "tokenizer": "SentencepiecesTokenizer", "tokenizer_conf": {"bpemodel": BPE_MODEL}}
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    shift = " ".join(["-8.0"] * 560)
    scale = " ".join(["0.25"] * 560)
    (out / "am.mvn").write_text(
        f"<Nnet>\n<Splice> 560 560\n[ 0 ]\n<AddShift> 560 560\n<LearnRateCoef> 0 [ {shift} ]\n"
        f"<Rescale> 560 560\n<LearnRateCoef> 0 [ {scale} ]\n</Nnet>\n"
    )
    return out


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "tiny-sensevoice-small"))
