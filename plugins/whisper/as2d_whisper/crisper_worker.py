"""The CrisperWhisper worker: run by the Python of its own environment (``as2d peers install crisperwhisper``).

CrisperWhisper's CTranslate2 fork (``ctranslate2-crisperwhisper``) replaces the ``ctranslate2`` module
and adds ``Whisper.generate_speculative``, so it cannot share a process with as2d. This script needs
only that fork and numpy (it imports nothing of as2d) and speaks one protocol on stdin/stdout:

- first line in: a JSON setup ``{"main", "draft", "compute_type", "draft_compute_type", "threads", "eot",
  "suppress_tokens", "d2m", "m2d"}``; out: ``{"ready": true, "ctranslate2": VERSION, "load_s": S}``.
- then per request, a JSON line ``{"mode": "greedy" | "speculative", "prompt", "max_new_tokens", "k",
  "k_min", "k_max", "shape"}`` followed by the log-mel features as raw little-endian float32 bytes of
  ``shape`` ([1, n_mels, 3000]); out: ``{"tokens", "encode_s", "decode_s"}`` (tokens without the end
  token, ``ended``: whether the end token came). Any failure answers ``{"error": "..."}``.

Both encoders run before the decode clock (``decode_s``); ``encode_s`` is theirs.
"""
import json
import os
import sys
import time


def _protocol_out():
    """A private copy of stdout for the protocol; fd 1 then points at stderr, so no library print corrupts it."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def _load(setup: dict):
    import ctranslate2

    if not hasattr(ctranslate2.models.Whisper, "generate_speculative"):
        raise RuntimeError(f"ctranslate2 {ctranslate2.__version__} at {ctranslate2.__file__} is not CrisperWhisper's "
                           "fork (no Whisper.generate_speculative): run `as2d peers install crisperwhisper`")
    threads = int(setup["threads"])
    main = ctranslate2.models.Whisper(setup["main"], device="cpu", compute_type=setup["compute_type"],
                                      intra_threads=threads)
    draft = ctranslate2.models.Whisper(setup["draft"], device="cpu", compute_type=setup["draft_compute_type"],
                                       intra_threads=threads)
    return ctranslate2, main, draft


def _decode(ct2, main, draft, setup: dict, request: dict, features) -> dict:
    mel = ct2.StorageView.from_array(features)
    prompt = [int(t) for t in request["prompt"]]
    eot, new = int(setup["eot"]), int(request["max_new_tokens"])
    start = time.perf_counter()
    encoded = main.encode(mel)
    draft_encoded = draft.encode(mel) if request["mode"] == "speculative" else None
    encode_s = time.perf_counter() - start
    start = time.perf_counter()
    if request["mode"] == "greedy":
        # CTranslate2 stops a Whisper decode after min(max_length // 2, max_length - prompt + 1) tokens.
        result = main.generate(encoded, [prompt], beam_size=1, max_length=max(2 * new, new + len(prompt) - 1),
                               suppress_blank=False, suppress_tokens=setup["suppress_tokens"])
        tokens = [int(t) for t in result[0].sequences_ids[0]]
        ended = len(tokens) < new
    elif request["mode"] == "speculative":
        tokens = [int(t) for t in main.generate_speculative(
            draft, encoded, draft_encoded, prompt=prompt, num_speculative_tokens=int(request["k"]), max_length=new,
            eot_id=eot, suppress_tokens=setup["suppress_tokens"], d2m=setup["d2m"], m2d=setup["m2d"],
            min_speculative_tokens=int(request.get("k_min", 0)), max_speculative_tokens=int(request.get("k_max", 0)),
            reset_adaptive_state=True)]
        ended = bool(tokens) and tokens[-1] == eot
        tokens = [t for t in tokens if t != eot]
    else:
        raise ValueError(f"unknown mode {request['mode']!r}")
    decode_s = time.perf_counter() - start
    return {"tokens": tokens, "ended": ended, "encode_s": encode_s, "decode_s": decode_s}


def main() -> None:
    import numpy as np

    out = _protocol_out()
    source = sys.stdin.buffer
    setup = json.loads(source.readline())
    try:
        start = time.perf_counter()
        ct2, main_model, draft = _load(setup)
        out.write(json.dumps({"ready": True, "ctranslate2": ct2.__version__, "load_s": time.perf_counter() - start})
                  + "\n")
    except Exception as exc:
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return
    while True:
        line = source.readline()
        if not line.strip():
            return  # end of input: the peer closed
        request = json.loads(line)
        shape = [int(n) for n in request["shape"]]
        data = source.read(4 * int(np.prod(shape)))
        try:
            features = np.frombuffer(bytearray(data), dtype="<f4").reshape(shape)  # writable: StorageView needs it
            reply = _decode(ct2, main_model, draft, setup, request, features)
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
