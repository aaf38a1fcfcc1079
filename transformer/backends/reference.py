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
from .score_mods import check_score_modifiers, check_sinks, modify_scores

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
    sinks: Float[Tensor, "..."] | None = None,  # noqa: UP037 (a jaxtyping shape: checked below)
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

    ``sinks`` (heads,), one learned logit ``z_h`` per query head (gpt-oss's attention sinks; Xiao et al. 2024,
    "Efficient Streaming Language Models with Attention Sinks"), joins the softmax's denominator and nothing else:
    ``p_ij = exp(s_ij) / (exp(z_h) + sum_j' exp(s_ij'))``, so a row's probabilities sum to less than 1 (the rest goes
    to no value). Computed as transformers' gpt-oss does: the sink as one more column, the row's maximum subtracted,
    the softmax, the column dropped. Every backend computes the same (docs/attention.md, "Attention sinks").
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
    if sinks is None:
        p_attn = scores.softmax(dim=-1)
    else:
        p_attn = _softmax_with_sinks(scores, sinks, query)
    if mask is not None:
        p_attn = p_attn * mask
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


def _softmax_with_sinks(scores: Tensor, sinks: Tensor, query: Tensor) -> Tensor:
    """The softmax of ``scores`` (..., heads, q_len, k_len) with one more logit per head in each denominator."""
    check_sinks("attention", sinks, query.size(-3) if query.dim() >= 3 else 1, scores.device)
    column = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)
    combined = torch.cat([scores, column], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return combined.softmax(dim=-1)[..., :-1]
