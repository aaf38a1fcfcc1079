"""The semantic reference of scaled dot-product attention (section 3.2.1): what every backend computes.

softmax(Q K^T / sqrt(d_k)) V with a boolean mask (True = may attend), dropout on the probabilities, and rows whose
every key is masked giving zeros (forward) and zero gradients (backward), never NaN. It is the ``"eager"`` backend,
the only one that returns the probabilities.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..contracts import Bool, Float, Tensor, checked, validate_dtype_device
from .score_mods import check_score_modifiers, modify_scores

__all__ = ["attention"]


@checked
def attention(
    query: Float[Tensor, "*batch q_len d_k"],
    key: Float[Tensor, "*batch k_len d_k"],
    value: Float[Tensor, "*batch k_len d_v"],
    mask: Bool[Tensor, "*#batch #q_len k_len"] | None = None,
    dropout: nn.Module | None = None,
    scale: float | None = None,
    *,
    softcap: float | int | None = None,
    alibi_slopes: Float[Tensor, "..."] | None = None,  # noqa: UP037 (a jaxtyping shape: checked below)
) -> tuple[Float[Tensor, "*batch q_len d_v"], Float[Tensor, "*batch q_len k_len"]]:
    """Compute 'Scaled Dot Product Attention' (section 3.2.1); returns (output, probabilities).

    The scores are ``Q K^T / sqrt(d_k)``, or ``Q K^T * scale`` when ``scale`` is given (a temperature).
    Masked scores are filled with the dtype's most negative finite value (not -1e9, which fp16
    cannot hold), and the probabilities are multiplied by the mask afterwards, so a fully
    masked row becomes all zeros with zero gradient instead of the uniform average (or NaN).
    ``key``, ``value`` and ``mask`` must be on the query's device, and ``key`` and ``value`` of its dtype (ValueError).

    Score modifiers (:mod:`transformer.backends.score_mods`), applied to the scaled scores before the mask:
    ``softcap`` c gives ``c * tanh(s / c)`` (Gemma 2); ``alibi_slopes`` (heads,) or (batch, heads), one per query head
    (the query's dim -3), adds ``-slope * |p(i) - j|`` with ``p(i) = k_len - q_len + i`` (ALiBi), after the cap.
    """
    validate_dtype_device("attention", query, "argument 'query'", key=key, value=value, mask=mask)
    if softcap is not None or alibi_slopes is not None:
        batch = query.size(0) if query.dim() >= 4 else 1
        heads = query.size(-3) if query.dim() >= 3 else 1
        check_score_modifiers("attention", softcap, alibi_slopes, batch, heads, query.device)
    if scale is None:
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    else:
        scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores = modify_scores(scores, softcap, alibi_slopes)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:
        p_attn = p_attn * mask
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn
