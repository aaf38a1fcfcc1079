"""The ``"torch"`` backend: ``torch.nn.functional.scaled_dot_product_attention`` given the most structured mask it
takes (none, ``is_causal``, one key row per sentence, or a dense boolean), for the modules and the drop-in alike.

The score modifiers (:mod:`transformer.backends.score_mods`): ALiBi alone is an additive float ``attn_mask`` (the bias
``-slope * |p(i) - j|``, -inf where the mask forbids), so torch's fused function still runs; a ``softcap`` is not a bias
(it reshapes the scores before the mask), so with one the attention is torch's math definition in plain PyTorch
(:func:`transformer.backends.sdpa_reference.reference`, dense scores). ``flex_attention``'s ``score_mod`` would express
it, but on the CPU without torch.compile it has no backward and its forward was no faster than the dense form
(``benchmarks/structured_attention.py``; docs/attention.md, "Documents, windows and score modifiers"). That form
computes float16 and bfloat16 inputs in float32, as torch's math backend does; with a softcap they are computed instead
as transformers' eager attention (Gemma 2's ``eager_attention_forward``) rounds them, so a half-precision Gemma 2
computes its logits bit for bit (:func:`half_softcap_attention`); float32 and float64 are unchanged.

The attention sinks (one logit ``z_h`` per query head, gpt-oss): one more key column whose key and value are zero and
whose additive float mask entry is ``z_h`` (its score is then exactly ``z_h``), the mask as -inf elsewhere where it
forbids; torch's function computes ``softmax([s, z_h]) [v, 0]``, which is the sinks' attention, and the gradient of
``z_h`` comes back through the float mask (:func:`sink_column_inputs`)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..common.versions import TORCH_VERSION
from ..masks import AttentionMask
from .score_mods import alibi_bias, modify_scores
from .sdpa_reference import reference

__all__ = ["alibi_attn_mask", "half_softcap_attention", "sink_column_inputs", "torch_mask_form", "torch_sdpa"]

_TORCH_HAS_GQA = TORCH_VERSION >= (2, 5)  # enable_gqa
# torch's operator itself (the object F.scaled_dot_product_attention names): a caller that rebinds
# F.scaled_dot_product_attention to the drop-in (as docs/integrations.md does to run torch's tests) gets torch's
# function here, not the drop-in again (a RecursionError before)
_TORCH_SDPA = torch._C._nn.scaled_dot_product_attention


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
    sinks: Tensor | None = None,
) -> Tensor:
    """torch's own function on inputs already checked, with the mask in its most structured form
    (:func:`torch_mask_form`). ``enable_gqa``: key/value heads (dim -3) shared by groups of query heads (torch < 2.5
    has no enable_gqa: the key/value heads are repeated for it). ``softcap``/``alibi_slopes``: the score modifiers,
    ALiBi as a float mask (:func:`alibi_attn_mask`), a cap through torch's math definition (see the module; in
    float16 and bfloat16 without sinks, :func:`half_softcap_attention`); ``sinks`` (heads,): one more key column
    (:func:`sink_column_inputs`)."""
    mask, is_causal = torch_mask_form(mask, query.size(-2), key.size(-2), is_causal)
    if softcap is not None and sinks is None and query.dtype in (torch.float16, torch.bfloat16):
        return half_softcap_attention(
            query, key, value, mask, dropout_p, is_causal, scale, enable_gqa, softcap, alibi_slopes
        )
    if softcap is not None:
        modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
        return reference(query, key, value, mask, dropout_p, is_causal, scale, enable_gqa, **modifiers)
    if alibi_slopes is not None:
        mask = alibi_attn_mask(mask, is_causal, alibi_slopes, query.size(-2), key.size(-2), query.dtype)
        is_causal = False
    if sinks is not None:
        key, value, mask = sink_column_inputs(query, key, value, mask, is_causal, sinks)
        is_causal = False
    if mask is not None and mask.dim() < 2:  # some fused CPU paths index dim -2 of the mask: give them one
        mask = mask.reshape(1, -1) if mask.dim() == 1 else mask.reshape(1, 1)
    if enable_gqa and _TORCH_HAS_GQA:
        return _TORCH_SDPA(
            query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=True
        )
    if enable_gqa:
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    return _TORCH_SDPA(query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)


def half_softcap_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    softcap: float,
    alibi_slopes: Tensor | None = None,
) -> Tensor:
    """Soft-capped attention on float16 or bfloat16 inputs, rounded as transformers' eager attention rounds it
    (Gemma 2's ``eager_attention_forward``): ``q k^T``, its scaling, the cap ``c * tanh(s / c)`` (and an ALiBi bias)
    each in the inputs' dtype, the mask, the softmax in float32 cast back to the dtype (``softmax(..., dtype=float32)
    .to(query.dtype)``), dropout, and the product with the values in the dtype. The mask forbids with -inf where
    theirs adds the dtype's minimum: the same probabilities (both exponentials are 0 in float32). A row with no key
    left outputs 0, as :func:`transformer.backends.sdpa_reference.reference`. Inputs already checked
    (a float mask is added)."""
    if enable_gqa:  # query head h reads key/value head h // group, as transformers' repeat_kv
        group = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
    scores = torch.matmul(query, key.transpose(-2, -1))
    if query.size(-1) > 0:
        scores = scores * (query.size(-1) ** -0.5 if scale is None else scale)
    scores = modify_scores(scores, softcap, alibi_slopes)
    if is_causal:
        mask = torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()
    if mask is not None:
        bias = None if mask.dtype == torch.bool else mask.to(scores.dtype)  # a float mask added in the dtype, as theirs
        scores = scores.masked_fill(mask.logical_not(), float("-inf")) if bias is None else scores + bias
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1, dtype=torch.float32).masked_fill(empty, 0.0)
    probs = probs.to(query.dtype)
    if dropout_p > 0.0:
        probs = torch.nn.functional.dropout(probs, dropout_p, training=True)
    return torch.matmul(probs, value)


def sink_column_inputs(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, is_causal: bool, sinks: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """(key, value, float mask) with the sinks as one more key column: a zero key and a zero value appended to every
    (key/value) head, and a float mask of the query's dtype broadcast to (..., heads, q_len, k_len + 1): 0 where the
    ``mask`` (boolean, float or ``is_causal``, top-left) allows, -inf where it forbids (a float mask added as it is),
    and ``z_h`` in the last column. The sink's score is then ``q . 0 * scale + z_h = z_h`` and its value zero:
    ``softmax([s, z_h]) [v, 0]`` is the sinks' attention. A row with no key left keeps the sink: it outputs 0."""
    q_len, k_len, heads = query.size(-2), key.size(-2), query.size(-3)
    if is_causal:
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril()
    if mask is None:
        bias = query.new_zeros(heads, q_len, k_len)
    elif mask.dtype == torch.bool:
        bias = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(~mask, float("-inf"))
    else:
        bias = mask.to(query.dtype)
    shape = torch.broadcast_shapes(bias.shape, (heads, q_len, k_len))
    column = sinks.to(query.dtype)[:, None, None].expand(*shape[:-1], 1)
    bias = torch.cat([bias.expand(shape), column], dim=-1)
    key = torch.cat([key, key.new_zeros(*key.shape[:-2], 1, key.size(-1))], dim=-2)
    value = torch.cat([value, value.new_zeros(*value.shape[:-2], 1, value.size(-1))], dim=-2)
    return key, value, bias


def alibi_attn_mask(
    mask: Tensor | None, is_causal: bool, slopes: Tensor, q_len: int, k_len: int, dtype: torch.dtype
) -> Tensor:
    """ALiBi's bias ``-slope * |p(i) - j|`` as an additive float mask of ``dtype`` for torch's function, with the
    mask in it: -inf where a boolean ``mask`` (or ``is_causal``, top-left) forbids, a float ``mask`` added. Shaped
    (heads, q_len, k_len) or (batch, heads, q_len, k_len), broadcast with the mask's own dims. A row with no key left
    is all -inf: torch (>= 2.5) gives it zeros and zero gradients, as the reference does."""
    bias = alibi_bias(slopes, q_len, k_len, dtype)
    if is_causal:
        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=bias.device).tril()
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(mask.logical_not(), float("-inf"))
    return bias + mask.to(dtype)
