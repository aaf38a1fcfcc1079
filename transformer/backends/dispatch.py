"""Running a backend once it is chosen: the masks each backend takes, and a refusal raised from a compiled graph.

:func:`run_backend` runs the attention on the backend :func:`~transformer.backends.choice.resolve_backend` chose: the
fused kernel gets the structured mask's parts as they are, torch's function the most structured form it takes
(``transformer.backends.torch_backend``), the reference a dense mask. A backend that cannot run the inputs is refused
with a ValueError (:func:`refuse`); while torch.compile traces, the refusal becomes an operator that raises it when
the compiled graph runs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.graph_errors import raising_operator
from ..masks import AttentionMask
from .reference import attention
from .torch_backend import torch_sdpa

__all__ = ["Refusal", "dense_heads_mask", "kernel_masks", "refuse", "run_backend"]


def dense_heads_mask(mask: Tensor | AttentionMask | None, q_len: int, k_len: int) -> Tensor | None:
    """A 4-D dense mask broadcastable to (batch, heads, q_len, k_len) (eager and the general torch path)."""
    if isinstance(mask, AttentionMask):
        mask = mask.to_dense(q_len, k_len)
        return None if mask is None else mask.unsqueeze(1)
    return mask


def kernel_masks(mask: Tensor | AttentionMask | None) -> dict:
    """The fused kernel's own mask arguments: the structured parts as they are, a dense mask as a 4-D tensor.
    Documents and the window are passed only when given (``documents``, ``window_left``, ``window_right``)."""
    if not isinstance(mask, AttentionMask):
        return {"mask": mask}
    dense = None if mask.dense is None else mask.dense.unsqueeze(1)
    parts = {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": mask.causal}
    for name in ("documents", "window_left", "window_right"):
        if getattr(mask, name) is not None:
            parts[name] = getattr(mask, name)
    return parts


def score_modifiers(softcap: float | None, alibi_slopes: Tensor | None, sinks: Tensor | None = None) -> dict:
    """The score modifiers and the attention sinks as keyword arguments, only those given (``softcap``,
    ``alibi_slopes``, ``sinks``)."""
    given = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
    return {name: value for name, value in given.items() if value is not None}


def _zero_padded_queries(out: Tensor, mask: Tensor | AttentionMask | None) -> Tensor:
    """Rows past ``query_lengths`` attend nothing: output 0 (and gradient 0), as the dense mask would give."""
    if isinstance(mask, AttentionMask) and mask.query_lengths is not None:
        valid = torch.arange(out.size(-2), device=out.device) < mask.query_lengths[:, None]
        return out * valid[:, None, :, None].to(out.dtype)
    return out


class Refusal:
    """What :func:`refuse` returns while torch.compile traces: the error a backend choice must raise, kept until
    :func:`run_backend` puts it in the graph (an operator that raises it when the graph runs)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def refuse(message: str) -> Refusal:
    """Raise ``ValueError(message)``; while torch.compile traces, return a :class:`Refusal` instead, which
    :func:`run_backend` turns into an operator that raises the same ValueError from the compiled graph (raising while
    tracing would reach a ``fullgraph=True`` caller as Dynamo's ``Unsupported``)."""
    if torch.compiler.is_compiling():
        return Refusal(message)
    raise ValueError(message)


_backend_refused = raising_operator("backend_refused", lambda message, sizes: ValueError(message))


def run_backend(
    name: str | Refusal,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | AttentionMask | None,
    dropout_p: float,
    scale: float | None = None,
    *,
    softcap: float | None = None,
    alibi_slopes: Tensor | None = None,
    sinks: Tensor | None = None,
) -> Tensor:
    """Attention on backend ``name`` (already resolved), inputs already checked; ``scale`` None is 1/sqrt(d_k);
    ``softcap`` and ``alibi_slopes`` the score modifiers of :mod:`transformer.backends.score_mods`, ``sinks`` the
    (heads,) attention sinks' logits (every backend takes them: the kernel's, torch's as one more key column, the
    reference's).

    A :class:`Refusal` (what :func:`resolve_backend` gives while torch.compile traces a choice that cannot run) becomes
    the operator that raises its ValueError when the compiled graph runs."""
    if isinstance(name, Refusal):
        shape = [*q.shape[:-1], v.size(-1)]
        return _backend_refused(name.message, [], shape, q.dtype, q.device, None)
    if name == "triton":
        from .. import kernels

        modifiers = score_modifiers(softcap, alibi_slopes, sinks)
        out = kernels.flash_attention(
            q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask), **modifiers
        )
        return _zero_padded_queries(out, mask)
    if name == "torch":
        return torch_sdpa(q, k, v, mask, dropout_p, scale, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks)
    dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None
    dense = dense_heads_mask(mask, q.size(-2), k.size(-2))
    modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
    return attention.unchecked(q, k, v, dense, dropout, scale, **modifiers)[0]
