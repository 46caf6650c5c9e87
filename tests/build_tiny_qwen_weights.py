"""Seeded random weights shared by the tiny Qwen-family builders (Omni, Qwen3-ASR).

Both builders initialise their thinker the same way and make the drafter as the
target plus a little weight noise; keeping that here means the two families'
fixtures are built by one rule. Call both inside ``torch.no_grad()``, after
``torch.manual_seed``; the order of operations fixes the random stream, so the
fixtures rebuild identically.
"""
from __future__ import annotations


def init_weights(model, thinker) -> None:
    """Small normal matrices, unit norms, zero biases; a wide LM head (no near-tie argmax), unit embeddings."""
    for name, p in model.named_parameters():
        if p.dim() > 1:
            p.normal_(0, 0.5 / p.shape[-1] ** 0.5)
        elif "norm" in name or "ln" in name:
            p.fill_(1.0)
        else:
            p.zero_()
    thinker.lm_head.weight.mul_(8.0)  # spread logits so argmax has no near ties
    thinker.model.embed_tokens.weight.normal_(0, 1.0)


def copy_with_noise(model, target, seed: int, noise: float) -> None:
    """Make ``model`` the ``target`` plus noise of ``noise`` times each matrix's std: a drafter that mostly agrees."""
    import torch

    model.load_state_dict(target.state_dict())
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        if p.dim() > 1:
            p.add_(torch.randn(p.shape, generator=gen) * p.std() * noise)
