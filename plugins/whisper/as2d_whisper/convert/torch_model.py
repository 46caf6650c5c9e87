"""Whisper as a small torch module with the graph contract the runtime reads (conversion time only)."""
from __future__ import annotations

import math

import numpy as np


def build_torch_model(state: dict[str, np.ndarray], dims: dict[str, int], tied_output: bool):
    """Construct the torch Whisper module and load the converted weights."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Attention(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads, self.head_dim = heads, d // heads
            self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))

        def split(self, x):  # [..., T, d] -> [..., H, T, hd] (the decoder over several windows has a window axis)
            return x.reshape(*x.shape[:-1], self.heads, self.head_dim).transpose(-3, -2)

        def attend(self, q, k, v, mask=None):
            scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
            if mask is not None:
                scores = scores + mask
            out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [..., H, T, hd]
            return self.out_proj(out.transpose(-3, -2).reshape(*out.shape[:-3], out.shape[-2], -1))

        def attend_audio(self, q, k, v):
            """Cross-attention of B rows [B, H, K, hd] on A windows' audio [A, H, T, hd], A = B (a window a row)
            or A = 1 (every row on one window: beam search). A window's rows are one block of queries, so each
            head's audio K and V are read once a call rather than once a row: a 5-beam step of whisper-base
            costs a sixth less (BENCHMARKS.md section 18)."""
            heads, width, hd = q.shape[1:]
            rows = q.reshape(k.shape[0], -1, heads, width, hd).transpose(1, 2).reshape(k.shape[0], heads, -1, hd)
            scores = torch.matmul(rows, k.transpose(-1, -2)) * (1.0 / math.sqrt(self.head_dim))
            out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [A, H, R * K, hd]
            out = out.reshape(k.shape[0], heads, -1, width, hd).permute(0, 2, 3, 1, 4)  # [A, R, K, H, hd]
            return self.out_proj(out.reshape(-1, width, heads * hd))

        def attend_beams(self, q, shared, rows, new, mask):
            """Self-attention of B beam rows' queries [B, H, K, hd] over three blocks of keys, one softmax over all:
            the prompt every row shares (K, V, each [1, H, S, hd], read in one block of all rows' queries, as
            ``attend_audio`` reads the audio), each row's own response (K, V, each position-major [R, B, H, hd]) and
            the new positions (K, V, each [B, H, K, hd]). No block is copied into one cache a step: a 5-beam step
            after 120-200 prompt positions costs 1.3-1.7x less than on the windows graph (BENCHMARKS.md section 36)."""
            n_rows, heads, width, hd = q.shape
            scale = 1.0 / math.sqrt(self.head_dim)
            block = q.transpose(0, 1).reshape(1, heads, -1, hd)  # [1, H, B * K, hd]
            on_prompt = torch.matmul(block, shared[0].transpose(-1, -2)).reshape(heads, n_rows, width, -1)
            on_rows = torch.matmul(q, rows[0].permute(1, 2, 3, 0))  # [B, H, K, R]
            on_new = torch.matmul(q, new[0].transpose(-1, -2))
            scores = torch.cat([on_prompt.transpose(0, 1), on_rows, on_new], dim=-1) * scale + mask
            weights = torch.softmax(scores, dim=-1)
            n_prompt, n_own = shared[0].shape[2], rows[0].shape[0]
            prompt_weights = weights[..., :n_prompt].transpose(0, 1).reshape(1, heads, -1, n_prompt)
            out = (torch.matmul(prompt_weights, shared[1]).reshape(heads, n_rows, width, hd).transpose(0, 1)
                   + torch.matmul(weights[..., n_prompt:n_prompt + n_own], rows[1].permute(1, 2, 0, 3))
                   + torch.matmul(weights[..., n_prompt + n_own:], new[1]))
            return self.out_proj(out.transpose(1, 2).reshape(n_rows, width, heads * hd))

    class EncoderLayer(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.self_attn = Attention(d, heads)
            self.self_attn_layer_norm, self.final_layer_norm = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):  # [T, d]
            h = self.self_attn_layer_norm(x)
            a = self.self_attn
            x = x + a.attend(a.split(a.q_proj(h)), a.split(a.k_proj(h)), a.split(a.v_proj(h)))
            return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))

    class DecoderLayer(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.self_attn, self.encoder_attn = Attention(d, heads), Attention(d, heads)
            self.self_attn_layer_norm = nn.LayerNorm(d)
            self.encoder_attn_layer_norm = nn.LayerNorm(d)
            self.final_layer_norm = nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x, past_k, past_v, cross_k, cross_v, mask):
            def attend(a, q, k_new, v_new):
                return a.attend(q, torch.cat([past_k, k_new], dim=-2), torch.cat([past_v, v_new], dim=-2), mask)

            return self.step(x, attend, cross_k, cross_v)

        def beam_step(self, x, prompt, own, audio, mask):
            """``forward`` for beam rows (``Attention.attend_beams``)."""
            return self.step(x, lambda a, q, k_new, v_new: a.attend_beams(q, prompt, own, (k_new, v_new), mask),
                             *audio)

        def step(self, x, attend_self, cross_k, cross_v):
            """The layer on x [..., K, d], its self-attention ``attend_self(attention, q, new K, new V)`` (heads split):
            returns x with the new K and V, each [..., K, H, hd]."""
            h = self.self_attn_layer_norm(x)
            a = self.self_attn
            k_new, v_new = a.k_proj(h), a.v_proj(h)  # [..., K, d]
            x = x + attend_self(a, a.split(a.q_proj(h)), a.split(k_new), a.split(v_new))
            c = self.encoder_attn
            q = c.split(c.q_proj(self.encoder_attn_layer_norm(x)))
            x = x + (c.attend_audio(q, cross_k, cross_v) if q.dim() == 4 else c.attend(q, cross_k, cross_v))
            x = x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))
            shape = (*k_new.shape[:-1], a.heads, a.head_dim)
            return x, k_new.reshape(shape), v_new.reshape(shape)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = dims["d_model"]
            self.conv1 = nn.Conv1d(dims["n_mels"], d, 3, padding=1)
            self.conv2 = nn.Conv1d(d, d, 3, stride=2, padding=1)
            self.embed_positions = nn.Embedding(dims["n_audio_ctx"], d)
            self.layers = nn.ModuleList(EncoderLayer(d, dims["encoder_heads"]) for _ in range(dims["encoder_layers"]))
            self.layer_norm = nn.LayerNorm(d)

        def forward(self, mel):  # [1, n_mels, 3000] -> [1500, d]
            x = F.gelu(self.conv2(F.gelu(self.conv1(mel))))[0].transpose(0, 1)
            x = x + self.embed_positions.weight
            for layer in self.layers:
                x = layer(x)
            return self.layer_norm(x)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            d = dims["d_model"]
            self.embed_tokens = nn.Embedding(dims["n_vocab"], d)
            self.embed_positions = nn.Embedding(dims["n_text_ctx"], d)
            self.layers = nn.ModuleList(DecoderLayer(d, dims["decoder_heads"]) for _ in range(dims["decoder_layers"]))
            self.layer_norm = nn.LayerNorm(d)

    class Whisper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Module()
            self.model.encoder, self.model.decoder = Encoder(), Decoder()
            # The output weight is stored once as [d, vocab]: the logits are a MatMul
            # with a constant (which the int8 quantizer handles) and, when tied, the
            # token lookup gathers columns of the same tensor (``embed``).
            self.proj_out_t = nn.Parameter(torch.empty(dims["d_model"], dims["n_vocab"]))
            self.lookup_t = None  # the lookup's fp16 copy, where it holds the same numbers (``narrow_lookup``)

        def narrow_lookup(self) -> bool:
            """Give the tied token lookup an fp16 copy of the output weight if every value is an fp16 number.

            ONNX Runtime packs the product's weight into a copy of its own, so a lookup reading the same fp32
            tensor keeps the vocabulary matrix twice (whisper-base: 106 MB each). Weights shipped in fp16
            (every packaged model, faster-whisper's folders) lose nothing in fp16: the lookup reads half
            the bytes and widens them to the same fp32 numbers (BENCHMARKS.md section 40).
            """
            weight = self.proj_out_t.detach()
            narrow = weight.half()
            if not torch.equal(narrow.float(), weight):
                return False
            self.lookup_t = nn.Parameter(narrow, requires_grad=False)  # a parameter: a named initializer when exported
            return True

        def embed(self, tokens):
            """The embeddings [N, d] of tokens [N]: the tied output weight's columns, or the lookup's own table."""
            if not tied_output:
                return self.model.decoder.embed_tokens(tokens)
            table = self.proj_out_t if self.lookup_t is None else self.lookup_t
            return torch.index_select(table, 1, tokens).t().float()

        def cross_kv(self, mel):
            """Encoder plus every decoder layer's cross K/V: [L, 2, H, T_audio, hd]."""
            x = self.model.encoder(mel)
            kv = []
            for layer in self.model.decoder.layers:
                c = layer.encoder_attn
                kv.append(torch.stack([c.split(c.k_proj(x)), c.split(c.v_proj(x))]))
            return torch.stack(kv)

        def decode(self, tokens, past, cross_kv):
            """Append tokens [1,K] after the P cached positions in past [P, L, 2, H, hd].

            ``cross_kv[i][0]`` and ``cross_kv[i][1]`` are layer i's audio K and V: the encoder's stacked
            output, or one tensor per layer and kind (the exported decoder's inputs, see ``graph_io``).
            """
            dec = self.model.decoder
            n_past, n_new = past.shape[0], tokens.shape[1]
            positions = torch.arange(n_new, dtype=torch.int64) + n_past
            x = self.embed(tokens[0]) + dec.embed_positions(positions)
            key_pos = torch.arange(n_new + n_past, dtype=torch.int64)
            mask = torch.where(key_pos.unsqueeze(0) > positions.unsqueeze(1),
                               torch.tensor(float("-inf")), torch.tensor(0.0))
            new_k, new_v = [], []
            for i, layer in enumerate(dec.layers):
                pk = past[:, i, 0].transpose(0, 1)  # [H, P, hd]
                pv = past[:, i, 1].transpose(0, 1)
                x, k, v = layer(x, pk, pv, cross_kv[i][0], cross_kv[i][1], mask)
                new_k.append(k)
                new_v.append(v)
            x = dec.layer_norm(x)
            logits = torch.matmul(x, self.proj_out_t).unsqueeze(0)
            new_kv = torch.stack([torch.stack([k, v], dim=1) for k, v in zip(new_k, new_v)], dim=1)
            return logits, new_kv  # [1,K,V], [K, L, 2, H, hd]

        def rows_input(self, tokens, starts, lengths, n_cached, n_shared=None):
            """The decoder's input for rows of tokens [B, K] that start at positions ``starts`` [B], and the additive
            mask [B, 1, K, (S +) P + K] over what each row's queries may read: the S positions every row shares (if
            ``n_shared`` is given), its first ``lengths[b]`` of the P cached ones, and the new ones up to its own."""
            dec = self.model.decoder
            n_rows, n_new = tokens.shape
            positions = starts.unsqueeze(1) + torch.arange(n_new, dtype=torch.int64).unsqueeze(0)
            x = self.embed(tokens.reshape(-1)).reshape(n_rows, n_new, -1) + dec.embed_positions(positions)
            not_yours = torch.arange(n_cached).view(1, 1, n_cached) >= lengths.view(n_rows, 1, 1)
            ahead = torch.arange(n_new).view(1, n_new) > torch.arange(n_new).view(n_new, 1)
            blocks = [not_yours.expand(n_rows, n_new, n_cached), ahead.unsqueeze(0).expand(n_rows, n_new, n_new)]
            if n_shared is not None:
                blocks.insert(0, torch.zeros(n_rows, n_new, n_shared, dtype=torch.bool))
            hidden = torch.cat(blocks, dim=2)
            return x, torch.zeros(hidden.shape).masked_fill(hidden, float("-inf")).unsqueeze(1)

        def decode_windows(self, tokens, cache, lengths, audio):
            """Append tokens [B, K] to B windows in one call.

            ``cache`` [P, B, L, 2, H, hd] is position-major, so the first P positions of every window are one
            contiguous block; window b's first ``lengths[b]`` positions are its own, the rest are masked.
            ``audio[i]`` is layer i's (K, V), each [B, H, T, hd], or [1, H, T, hd] for rows on one window (beams,
            ``attend_audio``). Returns the logits [B, K, V] and the new
            K/V [B, K, L, 2, H, hd].
            """
            dec = self.model.decoder
            x, mask = self.rows_input(tokens, lengths, lengths, cache.shape[0])  # mask [B, 1, K, P+K]
            new_k, new_v = [], []
            for i, layer in enumerate(dec.layers):
                pk = cache[:, :, i, 0].permute(1, 2, 0, 3)  # [B, H, P, hd]
                pv = cache[:, :, i, 1].permute(1, 2, 0, 3)
                x, k, v = layer(x, pk, pv, audio[i][0], audio[i][1], mask)
                new_k.append(k)
                new_v.append(v)
            logits = torch.matmul(dec.layer_norm(x), self.proj_out_t)
            new_kv = torch.stack([torch.stack([k, v], dim=2) for k, v in zip(new_k, new_v)], dim=2)
            return logits, new_kv

        def decode_beams(self, tokens, own, lengths, prompt, audio):
            """Append tokens [B, K] to B beam rows of one request, each after its first ``lengths[b]`` response
            positions; every row follows the same prompt.

            ``prompt[i]`` is layer i's prompt (K, V), each [1, H, S, hd]; ``own[i]`` its rows' response (K, V),
            each position-major [R, B, H, hd], a row's positions from ``lengths[b]`` on masked; ``audio[i]`` its
            (K, V), each [1, H, T, hd] (``Attention.attend_beams``). Returns the logits [B, K, V] and the new K/V
            [B, K, L, 2, H, hd].
            """
            dec = self.model.decoder
            n_prompt = prompt[0][0].shape[2]
            x, mask = self.rows_input(tokens, n_prompt + lengths, lengths, own[0][0].shape[0], n_prompt)  # S+R+K
            new_k, new_v = [], []
            for i, layer in enumerate(dec.layers):
                x, k, v = layer.beam_step(x, prompt[i], own[i], audio[i], mask)
                new_k.append(k)
                new_v.append(v)
            logits = torch.matmul(dec.layer_norm(x), self.proj_out_t)
            new_kv = torch.stack([torch.stack([k, v], dim=2) for k, v in zip(new_k, new_v)], dim=2)
            return logits, new_kv

    model = Whisper()
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items() if k != "proj_out.weight"}
    tensors["proj_out_t"] = torch.from_numpy(np.ascontiguousarray(state["proj_out.weight"].T))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"weight mapping mismatch: missing={missing} unexpected={unexpected}")
    if tied_output:
        model.narrow_lookup()
    return model.eval()
