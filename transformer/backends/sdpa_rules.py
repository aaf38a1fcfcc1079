"""torch's rules for the inputs of ``F.scaled_dot_product_attention`` (what the drop-in of
:mod:`transformer.backends.sdpa` refuses, with torch's exception types), torch's causal bias objects, and broadcasting
that never guards on a data-dependent size.

* :func:`check_inputs`: torch's refusals (TypeError, RuntimeError, IndexError) with a message naming the argument;
  returns the output's leading dims.
* :func:`causal_bias_form`: ``torch.nn.attention.bias.causal_upper_left`` / ``causal_lower_right`` (a ``CausalBias``,
  a tensor subclass whose storage is never initialised: torch reads only its variant and lengths, in its
  ``__torch_function__``) as the mask torch's own dispatch gives it: upper-left (or equal lengths) is ``is_causal``,
  lower-right the boolean ``tril(ones(L, S), diagonal=S - L)``; with ``is_causal=True`` torch's ValueError.
* sizes: torch.export may trace a batch whose size is data-dependent (an unbacked symbol); broadcasting decides
  ``size == 1`` with ``guard_or_false`` (an unknown size is not 1, as torch's own broadcasting assumes) and leaves an
  undecidable equality to a run-time ``torch._check``, never a guard.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true
from torch.nn.attention._utils import _validate_sdpa_input

from ..masks import AttentionMask

__all__ = ["broadcast_shapes", "causal_bias_form", "check_inputs"]

_NAME = "scaled_dot_product_attention"


def causal_bias_form(
    attn_mask, is_causal: bool, query: Tensor, key: Tensor, value: Tensor
) -> tuple[Tensor | AttentionMask | None, bool]:
    """``(attn_mask, is_causal)`` with a ``CausalBias`` replaced as torch's ``CausalBias._dispatch`` reads it (its
    ``variant``, ``seq_len_q`` and ``seq_len_kv``; never its uninitialised values); any other mask unchanged."""
    # (torch.nn.attention.bias imports Dynamo: read only for a mask whose class is a CausalBias, which cannot exist
    # before that module is imported, so `import transformer` and eager calls stay without the compiler)
    if attn_mask is None or not any(c.__name__ == "CausalBias" for c in type(attn_mask).__mro__):
        return attn_mask, is_causal
    from torch.nn.attention.bias import CausalBias, CausalVariant

    if not isinstance(attn_mask, CausalBias):
        return attn_mask, is_causal
    if is_causal:
        raise ValueError("CausalBias should not be used with causal=True")
    variant, q_len, k_len = attn_mask.variant, attn_mask.seq_len_q, attn_mask.seq_len_kv
    if variant == CausalVariant.UPPER_LEFT or (variant == CausalVariant.LOWER_RIGHT and q_len == k_len):
        return None, True
    if variant == CausalVariant.LOWER_RIGHT:  # query i sees keys j <= i + (S - L): aligned to the bottom right
        if isinstance(query, Tensor) and isinstance(key, Tensor) and isinstance(value, Tensor):
            _validate_sdpa_input(query, key, value)  # torch validates here first, with ValueError (its own check)
        ones = torch.ones(q_len, k_len, dtype=torch.bool, device=getattr(query, "device", None))
        return ones.tril(diagonal=k_len - q_len), False
    raise ValueError(f"CausalBias.variant must be a CausalVariant type, but found: {variant}")


def _is_one(size) -> bool:
    """``size == 1``; for a symbolic size only when it is known to be (an unbacked size is taken as not 1)."""
    return size == 1 if type(size) is int else guard_or_false(size == 1)


def _may_equal(a, b) -> bool:
    """False only when ``a != b`` is known; an undecidable equality is checked when the graph runs."""
    if type(a) is int and type(b) is int:
        return a == b
    if not guard_or_true(a == b):
        return False
    torch._check(a == b, lambda: f"{_NAME}: sizes {a} and {b} must be equal (or one of them 1) to broadcast")
    return True


def broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """torch's broadcasting of shapes (ValueError when they do not broadcast), without guarding on unbacked sizes."""
    n = max(len(shape) for shape in shapes)
    out: list = [1] * n
    for shape in shapes:
        for i, size in enumerate(shape, n - len(shape)):
            if _is_one(size):
                continue
            if _is_one(out[i]):
                out[i] = size
            elif not _may_equal(out[i], size):
                raise ValueError(f"dim {i}: {out[i]} vs {size}")
    return tuple(out)


def check_inputs(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) -> tuple[int, ...]:
    """Raise what torch raises for inputs it refuses (the same exception type, a message naming the argument);
    return the output's leading dims (the broadcast batch dims, then the heads)."""
    for position, (name, t) in enumerate((("query", query), ("key", key), ("value", value)), start=1):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{_NAME}(): argument '{name}' (position {position}) must be Tensor, not {type(t).__name__}"
            )
    if attn_mask is not None and not isinstance(attn_mask, (Tensor, AttentionMask)):
        raise TypeError(
            f"{_NAME}(): argument 'attn_mask' must be Tensor, AttentionMask or None, not {type(attn_mask).__name__}"
        )
    for name, flag in (("is_causal", is_causal), ("enable_gqa", enable_gqa)):
        if type(flag) is not bool:
            raise TypeError(f"{_NAME}(): argument '{name}' must be bool, not {type(flag).__name__}")
    for name, number in (("dropout_p", dropout_p), ("scale", 1.0 if scale is None else scale)):
        if type(number) is bool or not isinstance(number, (int, float)):
            raise TypeError(f"{_NAME}(): argument '{name}' must be float, not {type(number).__name__}")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(
            f"Expected query, key, and value to have the same dtype, but got query.dtype: {query.dtype} "
            f"key.dtype: {key.dtype} and value.dtype: {value.dtype} instead."
        )
    if not query.device == key.device == value.device:
        raise RuntimeError(
            f"Expected query, key, and value to have the same device type, but got query.device: "
            f"{query.device} key.device: {key.device} and value.device: {value.device} instead."
        )
    if min(query.dim(), key.dim(), value.dim()) < 2:
        raise RuntimeError(
            f"Expected query, key, and value to all be at least 2 dimensional, but got query.dim: "
            f"{query.dim()} key.dim: {key.dim()} and value.dim: {value.dim()} instead."
        )
    if not query.is_floating_point():
        raise RuntimeError(f"{_NAME}: query, key and value must be floating point tensors, got {query.dtype}")
    if not 0.0 <= dropout_p <= 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if not _may_equal(key.size(-1), query.size(-1)):
        raise RuntimeError(
            f"{_NAME}: key's last dim (E={key.size(-1)}) must equal query's (E={query.size(-1)}): "
            f"query {list(query.shape)}, key {list(key.shape)}"
        )
    if not _may_equal(value.size(-2), key.size(-2)):
        raise RuntimeError(
            f"{_NAME}: value must have key's length S={key.size(-2)} (dim -2): key "
            f"{list(key.shape)}, value {list(value.shape)}"
        )
    batch = _batch_shape(query, key, value, enable_gqa)
    if isinstance(attn_mask, AttentionMask):
        if not query.dim() == key.dim() == value.dim() == 4:
            raise RuntimeError(
                f"{_NAME}: an AttentionMask needs 4-D (batch, heads, len, dim) query, key and value, "
                f"got query {list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}"
            )
        attn_mask.check_fits(batch[0], query.size(-2), key.size(-2))
    elif attn_mask is not None:
        _check_mask(attn_mask, query, (*batch, query.size(-2), key.size(-2)))
    return batch


def _batch_shape(query: Tensor, key: Tensor, value: Tensor, enable_gqa: bool) -> tuple[int, ...]:
    """The output's leading dims: torch.matmul's broadcasting of the three inputs' dims before (len, dim); under
    ``enable_gqa`` the heads (dim -3) are the query's, which the key's and the value's must divide."""
    shapes = [tuple(t.shape[:-2]) for t in (query, key, value)]
    if enable_gqa:
        heads = query.size(-3), key.size(-3), value.size(-3)  # IndexError for 2-D inputs, as torch
        if heads[0] % heads[1] or heads[0] % heads[2]:
            raise RuntimeError(
                f"Number of heads in key and value must divide the number of heads in query: query "
                f"has {heads[0]}, key {heads[1]}, value {heads[2]} (dim -3)"
            )
        shapes = [s[:-1] for s in shapes]
    try:
        lead = broadcast_shapes(shapes)
    except ValueError:
        raise RuntimeError(
            f"{_NAME}: the leading dims of query {list(query.shape)}, key {list(key.shape)} and "
            f"value {list(value.shape)} do not broadcast"
            + (" (heads, dim -3, excepted: enable_gqa=True)" if enable_gqa else "")
        ) from None
    return (*lead, query.size(-3)) if enable_gqa else lead


def _check_mask(mask: Tensor, query: Tensor, weights: tuple[int, ...]) -> None:
    if mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise RuntimeError(
            f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
            f"attn_mask.dtype: {mask.dtype} and query.dtype: {query.dtype} instead."
        )
    if mask.device != query.device:
        raise RuntimeError(f"{_NAME}: attn_mask must be on query's device {query.device}, got {mask.device}")
    shape = tuple(mask.shape)
    fits = len(shape) <= len(weights)
    for i in range(1, min(len(shape), len(weights)) + 1):  # indices, not all(zip(...)): torch 2.9's Dynamo traces it
        fits = fits and (_is_one(shape[-i]) or _may_equal(shape[-i], weights[-i]))
    if not fits:
        raise RuntimeError(
            f"{_NAME}: attn_mask of shape {list(shape)} does not broadcast to the attention weights' "
            f"shape {list(weights)} (leading dims, L, S) without growing them"
        )
