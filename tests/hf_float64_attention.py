"""transformers' eager attention with the softmax in the scores' own dtype, registered as an attention function for
the float64 comparisons of architectures that have no sdpa path (Gemma 2): their eager attention takes the softmax
in float32 (``softmax(..., dtype=torch.float32)``), where a float64 mask's minimum becomes -inf and a fully masked
row (a left-padded row's pad queries) NaN. Everything else (mask, scaling, soft cap, grouped heads) is theirs."""

from __future__ import annotations

import torch

NAME = "eager_softmax_in_dtype"


def register(transformers) -> str:
    """Register the attention (and transformers' eager mask under the same name); return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.gemma2.modeling_gemma2 import repeat_kv

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
        keys, values = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = torch.nn.functional.softmax(scores, dim=-1)  # theirs: dtype=torch.float32
        return torch.matmul(weights, values).transpose(1, 2).contiguous(), weights

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, eager_mask)
    return NAME
