"""The drop-in's reference: torch's definition of scaled dot-product attention (section 3.2.1; its math backend) in
plain PyTorch, the ``"eager"`` backend of :func:`transformer.backends.sdpa.scaled_dot_product_attention` and the
``"torch"`` backend's path for a soft-capped attention (:mod:`transformer.backends.torch_backend`).

Below both (the drop-in and torch's backend import it; it imports only the score modifiers), so the backends' imports
run one way (issue 44). Unlike :func:`transformer.backends.attention` it takes torch's arguments (a boolean or float
mask, ``is_causal``, ``enable_gqa``), computes float16 and bfloat16 in float32, and masks with -inf.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .score_mods import modify_scores

__all__ = ["reference"]


def reference(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """torch's definition (its math backend) in plain PyTorch, for inputs already checked: the ``"eager"`` backend.
    The score modifiers (``softcap``, then ``alibi_slopes``; :func:`~transformer.backends.score_mods.modify_scores`)
    act on the scaled scores before the mask, as in the reference. ``sinks`` (heads,): the logit ``z_h`` joins each
    row's softmax as one more column after the mask, and the column is dropped (no row is then empty: a row with no
    key left outputs 0).

    float16/bfloat16 inputs are computed in float32 and the result cast back, as torch's math backend does. Rows whose
    every score is -inf (a fully masked row) output 0 with zero gradients, as torch's safe softmax.
    """
    dtype = query.dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    q, k, v = query.to(acc), key.to(acc), value.to(acc)
    if enable_gqa:  # query head h reads key/value head h // group
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
    scores = q @ k.transpose(-2, -1)
    if q.size(-1) > 0:  # torch scales q and k before the product: with E = 0 the scores are 0, not 0 * inf
        scores = scores * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
    scores = modify_scores(scores, softcap, alibi_slopes)
    if is_causal:
        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask.to(acc)
    if sinks is not None:
        column = sinks.to(acc)[:, None, None].expand(*scores.shape[:-1], 1)
        probs = torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]
    else:
        empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
        probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)
    if dropout_p > 0.0:
        probs = F.dropout(probs, dropout_p, training=True)
    return (probs @ v).to(dtype)
