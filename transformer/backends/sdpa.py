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
  as torch >= 2.5 returns it on every backend;
* torch's causal bias objects (``torch.nn.attention.bias.causal_upper_left`` / ``causal_lower_right``) as
  ``attn_mask``, read as torch's own dispatch reads them (:func:`~transformer.backends.sdpa_rules.causal_bias_form`);
* ``torch.export`` of a data-dependent batch (the checks never guard on an unbacked size); under
  ``torch.jit.script`` a caller gets torch's operator ``aten::scaled_dot_product_attention`` (this function's extras
  are not TorchScript).

Inputs torch refuses are refused with torch's exception type (TypeError, RuntimeError, IndexError) and a message that
names the argument; where torch's own backends disagree (a mask together with ``is_causal``, keys and values of
different lengths, a mask on another device: some fused CPU paths accept them silently), this function always
refuses, as torch's reference (math) backend does.

Extras, keyword-only: the score modifiers ``softcap`` (``c * tanh(s / c)`` on the scaled scores, Gemma 2) and
``alibi_slopes`` ((heads,), or (batch, heads) with 4-D inputs: ``-slope * |p(i) - j|`` added, ALiBi) of
:mod:`transformer.backends.score_mods`, applied before the mask, and the attention ``sinks`` ((heads,): one logit
``z_h`` per query head in each softmax's denominator, ``p_ij = exp(s_ij) / (exp(z_h) + sum_j' exp(s_ij'))``, gpt-oss)
(ValueError naming the argument when bad).
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
from torch import Tensor
from torch.jit._builtins import _register_builtin

from ..masks import AttentionMask
from .choice import check_backend_name, current_backend, resolve_backend, triton_unsupported_reason
from .dispatch import run_backend
from .score_mods import check_score_modifiers, check_sinks
from .sdpa_reference import reference
from .sdpa_rules import causal_bias_form, check_inputs
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
    sinks: Tensor | None = None,
) -> Tensor:
    """``softmax(query @ key^T * scale + mask) @ value``, exactly as
    ``torch.nn.functional.scaled_dot_product_attention`` (see the module docstring), on our kernel where it takes the
    inputs.

    The arguments are torch's; ``attn_mask`` may also be an :class:`~transformer.masks.AttentionMask` (4-D inputs
    only), and ``backend`` (keyword only) names the implementation: ``"auto"`` (the default, through
    :func:`~transformer.backends.use_backend`), ``"triton"``, ``"torch"`` or ``"eager"``; ``softcap`` and
    ``alibi_slopes`` (keyword only) modify the scaled scores before the mask, as the reference does; ``sinks``
    (keyword only, (heads,)) put one logit per query head in each softmax's denominator (attention sinks).
    The signature is torch's, not a checked contract: bad inputs get torch's own exception types.
    """
    attn_mask, is_causal = causal_bias_form(attn_mask, is_causal, query, key, value)  # torch's causal bias objects
    batch = check_inputs(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    modifiers = {}
    if softcap is not None or alibi_slopes is not None or sinks is not None:
        _check_modifiers(softcap, alibi_slopes, batch, query.device, sinks)
        given = (("softcap", softcap), ("alibi_slopes", alibi_slopes), ("sinks", sinks))
        modifiers = {name: x for name, x in given if x is not None}
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


# torch.jit.script cannot compile this function (keyword-only extras, AttentionMask): a scripted caller gets torch's own
# operator instead, so code that calls the drop-in scripts as it does with torch's function (docs/integrations.md)
_register_builtin(scaled_dot_product_attention, "aten::scaled_dot_product_attention")


def _check_modifiers(
    softcap: float | None, slopes: Tensor | None, batch: tuple[int, ...], device, sinks: Tensor | None = None
) -> None:
    """The extras' rules (ValueError naming the argument): a finite cap > 0; slopes one per query head (the output's
    dim -3), (heads,) or, with 4-D inputs, (batch, heads); sinks (heads,); float, on the query's device."""
    for name, given in (("alibi_slopes", slopes), ("sinks", sinks)):
        if given is not None and not batch:
            raise ValueError(
                f"{_NAME}: argument '{name}' needs inputs with a heads dim (-3, at least 3-D), got 2-D inputs"
            )
    heads = batch[-1] if batch else 1
    check_sinks(_NAME, sinks, heads, device)
    rows = batch[0] if len(batch) == 2 else 1  # (batch, heads) slopes: 4-D inputs only
    check_score_modifiers(_NAME, softcap, slopes, rows, heads, device)
    if slopes is not None and slopes.dim() == 2 and len(batch) != 2:
        raise ValueError(
            f"{_NAME}: argument 'alibi_slopes' of shape (batch, heads) needs 4-D inputs, got output dims "
            f"{[*batch, 'L', 'Ev']}; give ({heads},) slopes"
        )


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
