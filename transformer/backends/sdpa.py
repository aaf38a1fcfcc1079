"""A drop-in for ``torch.nn.functional.scaled_dot_product_attention`` that runs our fused kernel where it can.

:func:`scaled_dot_product_attention` takes F.scaled_dot_product_attention's signature and semantics exactly:

* ``query`` (..., L, E), ``key`` (..., S, E), ``value`` (..., S, Ev), any rank from 2 up; the leading dims broadcast
  against each other as ``torch.matmul``'s do, and the output is (broadcast leading dims, L, Ev);
* ``attn_mask`` a boolean (True = may attend) or a float (added to the scores; float32 or the query's dtype),
  broadcastable to the attention weights (leading dims, L, S) and no larger;
* ``is_causal``: query i attends key j iff j <= i (top-left aligned when L != S, as torch); an error with a mask;
* ``scale`` (default 1/sqrt(E)), ``dropout_p`` (applied whenever it is above 0, training or not, as torch);
* ``enable_gqa``: key/value heads (dim -3) that divide the query heads; query head h reads key/value head
  h // (query heads / key heads), as torch's ``repeat_interleave``;
* a query row that may attend no key (a boolean row all False, a float row all -inf) outputs 0 with zero gradients,
  as torch >= 2.5 returns it on every backend.

Inputs torch refuses are refused with torch's exception type (TypeError, RuntimeError, IndexError) and a message that
names the argument; where torch's own backends disagree (a mask together with ``is_causal``, keys and values of
different lengths, a mask on another device: some fused CPU paths accept them silently), this function always
refuses, as torch's reference (math) backend does.

Extras, keyword-only: the score modifiers ``softcap`` (``c * tanh(s / c)`` on the scaled scores, Gemma 2) and
``alibi_slopes`` ((heads,), or (batch, heads) with 4-D inputs: ``-slope * |p(i) - j|`` added, ALiBi) of
:mod:`transformer.backends.score_mods`, applied before the mask (ValueError naming the argument when bad).
``attn_mask`` may be an :class:`~transformer.masks.AttentionMask` (with 4-D inputs; documents and a sliding window
too), and ``backend=``
picks the implementation (``backend`` > :func:`~transformer.backends.use_backend` > ``"auto"``, see
:mod:`transformer.backends`): ``"triton"`` (our kernel, on CUDA or under ``TRITON_INTERPRET=1``), ``"torch"``
(torch's own function), ``"eager"`` (:func:`reference`, torch's definition in plain PyTorch). ``"auto"`` runs the
kernel where it takes the inputs and torch's function where it does not (float masks, head dims outside 16-256,
value width != key width, ...); it logs which and why at DEBUG level on ``transformer.sdpa``. A backend asked for
by name never falls back: it raises ``ValueError`` with the reason.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..masks import AttentionMask
from .choice import check_backend_name, current_backend, resolve_backend, triton_unsupported_reason
from .dispatch import run_backend
from .score_mods import check_score_modifiers, modify_scores
from .torch_backend import torch_mask_form, torch_sdpa

__all__ = ["scaled_dot_product_attention", "reference"]

logger = logging.getLogger("transformer.sdpa")  # the name documented before the drop-in moved into backends/
_NAME = "scaled_dot_product_attention"


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | AttentionMask | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    backend: str | None = None,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``, exactly as
    ``torch.nn.functional.scaled_dot_product_attention`` (see the module docstring), on our kernel where it takes the
    inputs.

    The arguments are torch's; ``attn_mask`` may also be an :class:`~transformer.masks.AttentionMask` (4-D inputs
    only), and ``backend`` (keyword only) names the implementation: ``"auto"`` (the default, through
    :func:`~transformer.backends.use_backend`), ``"triton"``, ``"torch"`` or ``"eager"``; ``softcap`` and
    ``alibi_slopes`` (keyword only) modify the scaled scores before the mask, as the reference does.
    The signature is torch's, not a checked contract: bad inputs get torch's own exception types.
    """
    batch = check_inputs(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    modifiers = {}
    if softcap is not None or alibi_slopes is not None:
        _check_modifiers(softcap, alibi_slopes, batch, query.device)
        modifiers = {name: x for name, x in (("softcap", softcap), ("alibi_slopes", alibi_slopes)) if x is not None}
    requested = check_backend_name(backend) if backend is not None else (current_backend() or "auto")
    if requested == "triton" or (requested == "auto" and query.is_cuda):  # the kernel may run: its layout
        q4, k4, v4 = _as_4d(query, key, value, batch, enable_gqa)
        mask4 = AttentionMask(causal=True) if is_causal else _mask_4d(attn_mask, batch)
    else:  # resolve_backend only reads the dtype and the device to choose between torch and eager
        q4, k4, v4, mask4 = query, key, value, attn_mask
    name = resolve_backend(requested, q4, k4, v4, mask4, dropout_p, scale, **modifiers)
    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):  # a Logger call is a graph break
        why = _why(requested, name, q4, k4, v4, mask4, dropout_p, scale, modifiers)
        logger.debug("%s runs on %s: %s", _NAME, name, why)
    if name not in ("torch", "eager"):  # triton, or a refusal that run_backend raises (from the graph, if compiled)
        out = run_backend(name, q4, k4, v4, mask4, dropout_p, scale, **modifiers)
        return out.reshape(*batch, query.size(-2), value.size(-1))
    if name == "torch":
        return torch_sdpa(
            query, key, value, attn_mask, dropout_p, scale, is_causal=is_causal, enable_gqa=enable_gqa, **modifiers
        )
    mask, causal = torch_mask_form(attn_mask, query.size(-2), key.size(-2), is_causal)
    return reference(query, key, value, mask, dropout_p, causal, scale, enable_gqa, **modifiers)


def _check_modifiers(softcap: float | None, slopes: Tensor | None, batch: tuple[int, ...], device) -> None:
    """The extras' rules (ValueError naming the argument): a finite cap > 0; slopes one per query head (the output's
    dim -3), (heads,) or, with 4-D inputs, (batch, heads); float, on the query's device."""
    if slopes is not None and not batch:
        raise ValueError(
            f"{_NAME}: argument 'alibi_slopes' needs inputs with a heads dim (-3, at least 3-D), got 2-D inputs"
        )
    heads = batch[-1] if batch else 1
    rows = batch[0] if len(batch) == 2 else 1  # (batch, heads) slopes: 4-D inputs only
    check_score_modifiers(_NAME, softcap, slopes, rows, heads, device)
    if slopes is not None and slopes.dim() == 2 and len(batch) != 2:
        raise ValueError(
            f"{_NAME}: argument 'alibi_slopes' of shape (batch, heads) needs 4-D inputs, got output dims "
            f"{[*batch, 'L', 'Ev']}; give ({heads},) slopes"
        )


# ---------------------------------------------------------------------------- torch's rules, torch's errors
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
    if key.size(-1) != query.size(-1):
        raise RuntimeError(
            f"{_NAME}: key's last dim (E={key.size(-1)}) must equal query's (E={query.size(-1)}): "
            f"query {list(query.shape)}, key {list(key.shape)}"
        )
    if value.size(-2) != key.size(-2):
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
        lead = _broadcast(shapes)
    except ValueError:
        raise RuntimeError(
            f"{_NAME}: the leading dims of query {list(query.shape)}, key {list(key.shape)} and "
            f"value {list(value.shape)} do not broadcast"
            + (" (heads, dim -3, excepted: enable_gqa=True)" if enable_gqa else "")
        ) from None
    return (*lead, query.size(-3)) if enable_gqa else lead


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """torch's broadcasting of shapes (ValueError when they do not broadcast); plain Python, as fast as it gets."""
    n = max(len(shape) for shape in shapes)
    out = [1] * n
    for shape in shapes:
        for i, size in enumerate(shape, n - len(shape)):
            if size != 1:
                if out[i] != 1 and out[i] != size:
                    raise ValueError(f"dim {i}: {out[i]} vs {size}")
                out[i] = size
    return tuple(out)


def _check_mask(mask: Tensor, query: Tensor, weights: tuple[int, ...]) -> None:
    if mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise RuntimeError(
            f"Expected attn_mask dtype to be bool or float or to match query dtype, but got "
            f"attn_mask.dtype: {mask.dtype} and query.dtype: {query.dtype} instead."
        )
    if mask.device != query.device:
        raise RuntimeError(f"{_NAME}: attn_mask must be on query's device {query.device}, got {mask.device}")
    shape = tuple(mask.shape)
    if len(shape) > len(weights) or any(m not in (1, w) for m, w in zip(shape[::-1], weights[::-1], strict=False)):
        raise RuntimeError(
            f"{_NAME}: attn_mask of shape {list(shape)} does not broadcast to the attention weights' "
            f"shape {list(weights)} (leading dims, L, S) without growing them"
        )


# ---------------------------------------------------------------------------- the three implementations
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
) -> Tensor:
    """torch's definition (its math backend) in plain PyTorch, for inputs already checked: the ``"eager"`` backend.
    The score modifiers (``softcap``, then ``alibi_slopes``; :func:`~transformer.backends.score_mods.modify_scores`)
    act on the scaled scores before the mask, as in the reference.

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
    empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)
    if dropout_p > 0.0:
        probs = F.dropout(probs, dropout_p, training=True)
    return (probs @ v).to(dtype)


# ---------------------------------------------------------------------------- the kernel's layout
def _as_4d(
    query: Tensor, key: Tensor, value: Tensor, batch: tuple[int, ...], enable_gqa: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(batch, heads, len, dim) views of the three inputs, broadcast to the output's leading dims (``batch``, whose
    last entry is the heads). Key and value keep their own heads under ``enable_gqa``. A view unless broadcasting
    over several leading dims forces a copy."""
    *lead, heads = batch if batch else (1,)
    out = []
    for t, own_heads in ((query, True), (key, False), (value, False)):
        h = t.size(-3) if enable_gqa and not own_heads else heads
        shape = (*lead, h, t.size(-2), t.size(-1))
        if tuple(t.shape) != shape:
            t = t.expand(shape)
        out.append(t if len(lead) == 1 else t.reshape(math.prod(lead), h, t.size(-2), t.size(-1)))
    return out[0], out[1], out[2]


def _mask_4d(mask: Tensor | AttentionMask | None, batch: tuple[int, ...]) -> Tensor | AttentionMask | None:
    """A tensor mask broadcastable to (batch, heads, L, S) in the layout of :func:`_as_4d` (a view unless the output
    has several batch dims that the mask spells out)."""
    if mask is None or isinstance(mask, AttentionMask) or (mask.dim() == 4 and len(batch) == 2):
        return mask
    if mask.dim() <= 3:  # no batch dims of its own: pad with ones
        return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    tail = tuple(mask.shape[-3:])
    return mask.expand(*batch[:-1], *tail).reshape(math.prod(batch[:-1]), *tail)


def _why(
    requested: str,
    name: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask,
    dropout_p: float,
    scale: float | None,
    modifiers: dict | None = None,
) -> str:
    if requested != "auto":
        return f"asked for by name ({requested!r})"
    if name == "triton":
        return "the kernel takes these inputs"
    if q.dtype == torch.float64 and name == "eager":
        return "float64: only the reference supports every autograd mode"
    if name == "eager":
        return "this torch's fused attention returns NaN on fully masked rows (torch < 2.5)"
    if not q.is_cuda:
        return f"{q.device.type} tensors: auto runs the kernel on CUDA only"
    reason = triton_unsupported_reason(q, k, v, mask, dropout_p, scale, **(modifiers or {}))
    return f"the kernel does not take these inputs: {reason}"
