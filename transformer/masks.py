"""Boolean attention masks. Convention everywhere: True = may attend.

Masks broadcast against attention scores of shape (batch, q_len, k_len) (a heads axis is
added inside MultiHeadedAttention). A query row whose every key is masked produces a zero
output and zero gradients (see ``transformer.attention``).
"""

from __future__ import annotations

import torch

from .contracts import Bool, Int, Tensor, checked


def subsequent_mask(size: int, device: torch.device | str | None = None) -> Bool[Tensor, "1 size size"]:
    """Mask out subsequent positions (section 3.2.3): position i may attend to j iff j <= i."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"subsequent_mask: size must be a positive int, got {size!r}")
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


@checked
def padding_mask(tokens: Int[Tensor, "batch seq"], pad_id: int) -> Bool[Tensor, "batch 1 seq"]:
    """Keys that are real tokens (not ``pad_id``), shaped to broadcast over every query."""
    return (tokens != pad_id).unsqueeze(-2)


@checked
def target_mask(tgt: Int[Tensor, "batch seq"], pad_id: int | None) -> Bool[Tensor, "batch seq seq"]:
    """Decoder self-attention mask: causal, padded keys masked, and padded query rows masked too.

    The Annotated Transformer lets padded target positions attend; here their rows are fully
    masked, so they output zeros and contribute nothing.
    """
    causal = subsequent_mask(tgt.size(-1), device=tgt.device)
    if pad_id is None:
        return causal.expand(tgt.size(0), -1, -1)
    real = tgt != pad_id
    return causal & real.unsqueeze(-2) & real.unsqueeze(-1)
