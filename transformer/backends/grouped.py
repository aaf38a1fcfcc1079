"""Grouped-query attention in the modules (GQA; multi-query with one key/value head): query head h reads key/value
head h // (heads / kv_heads). The kernel reads the shared key/value heads in place, torch's function gets
``enable_gqa``; only the reference (``"eager"``) repeats them."""

from __future__ import annotations

from torch import Tensor

from ..masks import AttentionMask
from .dispatch import Refusal, run_backend
from .torch_backend import torch_sdpa

__all__ = ["repeat_kv_heads", "run_heads"]


def run_heads(
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
    """:func:`~transformer.backends.run_backend` for (batch, heads, len, d_k) queries whose key/value may have fewer
    heads (grouped-query attention: query head h reads key/value head h // (heads / kv_heads)).

    The kernel reads the key/value heads in place; torch's function gets ``enable_gqa``; only the reference
    (``"eager"``) repeats the key/value heads. ``sinks``: one logit per query head, as the queries' heads."""
    modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}
    if k.size(1) == q.size(1) or name == "triton":
        return run_backend(name, q, k, v, mask, dropout_p, scale, **modifiers)
    if name == "torch":
        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=True, **modifiers)
    k, v = repeat_kv_heads(k, v, q.size(1))
    return run_backend(name, q, k, v, mask, dropout_p, scale, **modifiers)


def repeat_kv_heads(k: Tensor, v: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """(batch, kv_heads, len, d) keys and values -> (batch, heads, len, d): each head repeated for its query group
    (what the reference computes with; the kernel and torch's function read the shared heads in place)."""
    if k.size(1) == heads:
        return k, v
    return k.repeat_interleave(heads // k.size(1), dim=1), v.repeat_interleave(heads // v.size(1), dim=1)
