"""A converted Whisper folder's vocabulary: its special tokens, the decoder prompt and the timestamp rules they make.

The target and both drafters build their prompts here, so all three prompt a request alike.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from as2d_core.contracts import Request, TokenPrompt
from as2d_core.decode.timestamps import TIME_PRECISION_S, TimestampRules
from as2d_core.setup.paths import ModelFilesMissing, check_folder

from .convert.weights import FORMAT_VERSION

INSTALL_HINT = "run `as2d models install whisper-base whisper-tiny.en`"
MARKUP = re.compile(r"<\|(\d+\.\d+)\|>")  # a timestamp in text (``<|2.40|>``), as ``timestamps.marked_up`` writes it
LAST_TIMESTAMP = 1500  # <|30.00|>
LAYOUT = ("a Whisper folder converted by as2d: model.json, tokenizer.json, the encoder and decoder graphs, each "
          "with its weights beside it (NAME.onnx.data)")


def read_model_folder(model_dir: str | Path, files: Sequence[str], hint: str = INSTALL_HINT):
    """``(folder, model.json, tokenizer)`` of a converted model folder holding ``files``; a clear error if not."""
    from tokenizers import Tokenizer

    folder = check_folder(model_dir, ["model.json", "tokenizer.json", *files], LAYOUT, "Whisper", hint)
    meta = json.loads((folder / "model.json").read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFilesMissing(
            f"{folder} holds model format {meta.get('format_version')}, this plugin reads {FORMAT_VERSION}; {hint} again")
    # an ONNX graph's weights lie beside it (``convert.onnx_export.save_graph``): named here if lost, not by ORT
    check_folder(folder, [f"{f}.data" for f in files if f.endswith(".onnx")], LAYOUT, "Whisper", hint)
    return folder, meta, Tokenizer.from_file(str(folder / "tokenizer.json"))


class TokenizerText:
    """Text of a model's ids and ids of text, through the folder's (complete) tokenizer; needs ``tokenizer`` and ``eot``."""

    tokenizer: "object"
    eot: int

    def decode_text(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode([int(t) for t in tokens if int(t) < self.eot])

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids


class WhisperVocabulary(TokenizerText):
    """A Whisper folder's special tokens (``meta``: its model.json), and the decoder prompt and timestamp rules
    they make: the target and both drafters build them here, so all three prompt a request alike."""

    meta: dict
    time_precision_s = TIME_PRECISION_S

    def read_special(self) -> None:
        special = self.special = self.meta["special"]
        self.sot, self.eot, self.no_timestamps = special["sot"], special["eot"], special["no_timestamps"]
        self.timestamp_begin: int = special.get("timestamp_begin", self.no_timestamps + 1)
        self.max_length: int = self.meta["max_length"]
        self.language_ids: dict[str, int] = self.meta.get("languages", {})  # multilingual: code -> token
        self.timestamp_rules = TimestampRules(self.timestamp_begin, self.eot, self.no_timestamps)

    @property
    def prompt_limit(self) -> int:
        """Whisper's cap on previous-text tokens: half the decoder's context, less one."""
        return self.max_length // 2 - 1

    def decoder_prompt(self, request: Request, language: str) -> list[int]:
        """``[<|startofprev|> hotwords previous] <|startoftranscript|> [language task] [<|notimestamps|>]`` (no
        hotwords with a prefix, as faster-whisper).

        The previous text is the request's prompt then its ``previous_text`` (either's ids as they are where given
        as ids of this vocabulary), of which the last tokens that fit are kept, as Whisper keeps them; hotwords
        come first, as faster-whisper places them, and take their room from it, so the prompt never crowds out
        the response. (A target refuses a prompt or hotwords over the limit on their own first,
        ``check_prompt``; a drafter keeps what fits.)
        """
        hotwords = [] if request.prefix else self._prompt_text(request.hotwords)[: self.prompt_limit]
        context = self._prompt_tokens(request.prompt) + self._prompt_tokens(request.previous_text)
        room = self.prompt_limit - len(hotwords)
        context = context[len(context) - room:] if len(context) > room else context
        start = [self.sot]
        if self.meta["multilingual"]:
            task = self.special["translate" if request.task == "translate" else "transcribe"]
            start += [self.language_ids[language], task]
        if request.timestamps == "none":
            start.append(self.no_timestamps)
        before = hotwords + context
        return ([self.special["sot_prev"], *before] if before else []) + start

    def forced_tokens(self, request: Request) -> list[int]:
        """What the response is made to start with after the prompt (faster-whisper's ``prefix``): the first
        timestamp in timestamp mode, then the prefix's tokens, as many as Whisper's prompt limit keeps."""
        if not (request.prefix or "").strip():
            return []
        start = [self.timestamp_begin] if request.timestamps != "none" else []
        return start + self.encode_text(" " + request.prefix.strip())[: self.prompt_limit]

    def check_prompt(self, request: Request) -> None:
        """Refuse a prompt or hotwords over Whisper's limit on their own (ValueError naming both numbers), and ids
        that are not this vocabulary's."""
        prompt = request.prompt
        if isinstance(prompt, TokenPrompt):
            if prompt.vocabulary != self.meta["vocabulary"]:
                raise ValueError(f"the prompt's token ids are of the vocabulary {prompt.vocabulary!r}; "
                                 f"{self.meta['name']} reads {self.meta['vocabulary']!r}")
            outside = sorted({t for t in prompt.tokens if not 0 <= t < self.meta["dims"]["n_vocab"]})
            if outside:
                raise ValueError(f"the prompt's token ids {outside} are not tokens of {self.meta['name']} "
                                 f"({self.meta['dims']['n_vocab']} ids)")
        for name, count in (("prompt", len(self._prompt_tokens(prompt))),
                            ("hotwords", len(self._prompt_text(request.hotwords)))):
            if count > self.prompt_limit:
                raise ValueError(f"the {name} is {count} tokens; {self.meta['name']} takes at most {self.prompt_limit} "
                                 f"(Whisper's limit: half its {self.max_length}-token context, less one)")

    def _prompt_tokens(self, prompt: str | TokenPrompt | None) -> list[int]:
        """A prompt as this vocabulary's tokens: text encoded, ids of this vocabulary as they are, another's read
        from their text."""
        if isinstance(prompt, TokenPrompt):
            own = prompt.vocabulary == self.meta["vocabulary"]
            return list(prompt.tokens) if own else self._prompt_text(prompt.text)
        return self._prompt_text(prompt)

    def _prompt_text(self, text: str | None) -> list[int]:
        """Tokens of prompt text as Whisper encodes it (one leading space, the ends stripped); its timestamp markup
        (``<|2.40|>``) becomes this vocabulary's timestamp tokens (tiny.en's tokenizer file lacks them)."""
        text = (text or "").strip()
        if not text:
            return []
        tokens: list[int] = []
        for i, piece in enumerate(MARKUP.split(text if text.startswith("<|") else " " + text)):
            if i % 2:
                tokens.append(self.timestamp_begin + min(round(float(piece) / self.time_precision_s), LAST_TIMESTAMP))
            elif piece:
                tokens += self.encode_text(piece)
        return tokens
