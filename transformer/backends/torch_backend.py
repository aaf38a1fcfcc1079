"""The ``"torch"`` backend: ``torch.nn.functional.scaled_dot_product_attention`` given the most structured mask it
takes (none, ``is_causal``, one key row per sentence, or a dense boolean), for the modules and the drop-in alike."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..common.versions import TORCH_VERSION
from ..masks import AttentionMask

__all__ = ["torch_mask_form", "torch_sdpa"]

_TORCH_HAS_GQA = TORCH_VERSION >= (2, 5)  # enable_gqa


def torch_mask_form(
    mask: Tensor | AttentionMask | None, q_len: int, k_len: int, is_causal: bool
) -> tuple[Tensor | None, bool]:
    """The mask as torch's function takes it: (tensor or None, is_causal). An AttentionMask becomes nothing, the
    causal flag, one (batch, 1, 1, k_len) key row, or its dense form with a heads axis; a tensor stays as it is."""
    if not isinstance(mask, AttentionMask):
        return mask, is_causal
    if mask.is_empty():
        return None, False
    if mask.causal and not mask.tensors() and not mask.has_window():
        return None, True
    if mask.key_only():
        return mask.to_dense(1, k_len).unsqueeze(1), False
    return mask.to_dense(q_len, k_len).unsqueeze(1), False


def torch_sdpa(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | AttentionMask | None,
    dropout_p: float,
    scale: float | None,
    *,
    is_causal: bool = False,
    enable_gqa: bool = False,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
) -> Tensor:
    """torch's own function on inputs already checked, with the mask in its most structured form
    (:func:`torch_mask_form`). ``enable_gqa``: key/value heads (dim -3) shared by groups of query heads (torch < 2.5
    has no enable_gqa: the key/value heads are repeated for it)."""
    if softcap is not None or alibi_slopes is not None:
        raise NotImplementedError("the torch backend does not take softcap or alibi_slopes yet (issue 29)")
    mask, is_causal = torch_mask_form(mask, query.size(-2), key.size(-2), is_causal)
    if mask is not None and mask.dim() < 2:  # some fused CPU paths index dim -2 of the mask: give them one
        mask = mask.reshape(1, -1) if mask.dim() == 1 else mask.reshape(1, 1)
    if enable_gqa and _TORCH_HAS_GQA:
        return F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=True
        )
    if enable_gqa:
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
