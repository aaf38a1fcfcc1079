"""Scaled dot-product attention (section 3.2.1), its backends, and multi-head attention (3.2.2).

``attention`` below is the semantic reference: softmax(Q K^T / sqrt(d_k)) V with a boolean
mask (True = may attend), dropout on the probabilities, and rows whose every key is masked
giving zeros (forward) and zero gradients (backward), never NaN.

Backends compute the same function:

* ``"eager"``: that reference in plain PyTorch (returns the probabilities too);
* ``"torch"``: ``torch.nn.functional.scaled_dot_product_attention``;
* ``"triton"``: our fused kernel (``transformer.kernels``), CUDA tensors, or CPU tensors
  under ``TRITON_INTERPRET=1``;
* ``"auto"``: triton when it can take the inputs on CUDA, else eager (the reason is logged).

The backend is chosen by ``TransformerConfig.attention_backend``, overridden by the
:func:`use_backend` context manager, overridden in turn by a ``backend=`` argument.
A backend that was asked for by name never falls back silently: it raises.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .config import AttentionBackend
from .contracts import Bool, Float, Tensor, checked

__all__ = ["attention", "scaled_dot_product_attention", "use_backend", "MultiHeadedAttention", "BACKENDS"]

logger = logging.getLogger(__name__)
BACKENDS: tuple[str, ...] = ("auto", "eager", "torch", "triton")
_override: str | None = None


def _check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"attention backend must be one of {', '.join(map(repr, BACKENDS))}; got {name!r}")
    return name


@contextlib.contextmanager
def use_backend(name: AttentionBackend) -> Iterator[None]:
    """Run every attention inside the block on backend ``name``, whatever the config says."""
    global _override
    previous, _override = _override, _check_backend(name)
    try:
        yield
    finally:
        _override = previous


@checked
def attention(
    query: Float[Tensor, "*batch q_len d_k"],
    key: Float[Tensor, "*batch k_len d_k"],
    value: Float[Tensor, "*batch k_len d_v"],
    mask: Bool[Tensor, "*#batch #q_len k_len"] | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Float[Tensor, "*batch q_len d_v"], Float[Tensor, "*batch q_len k_len"]]:
    """Compute 'Scaled Dot Product Attention' (section 3.2.1); returns (output, probabilities).

    Masked scores are filled with the dtype's most negative finite value (not -1e9, which fp16
    cannot hold), and the probabilities are multiplied by the mask afterwards, so a fully
    masked row becomes all zeros with zero gradient instead of the uniform average (or NaN).
    """
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    p_attn = scores.softmax(dim=-1)
    if mask is not None:
        p_attn = p_attn * mask
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


def _triton_reason(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> str | None:
    try:
        from . import kernels
    except ImportError as error:  # triton missing or broken
        return f"transformer.kernels cannot be imported ({error}); install the 'triton' extra"
    return kernels.unsupported_reason(q, k, v, mask=mask, dropout_p=dropout_p)


def _resolve(requested: str | None, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> str:
    name = _check_backend(requested or "auto")
    if name == "triton":
        reason = _triton_reason(q, k, v, mask, dropout_p)
        if reason is not None:
            raise ValueError(f"attention backend 'triton' cannot run these inputs: {reason}")
    if name != "auto":
        return name
    if not q.is_cuda:
        return "eager"
    reason = _triton_reason(q, k, v, mask, dropout_p)
    if reason is None:
        return "triton"
    logger.info("attention backend 'auto' falls back to eager: %s", reason)
    return "eager"


@checked
def scaled_dot_product_attention(
    query: Float[Tensor, "batch heads q_len d_k"],
    key: Float[Tensor, "batch heads k_len d_k"],
    value: Float[Tensor, "batch heads k_len d_k"],
    mask: Bool[Tensor, "#batch #heads #q_len k_len"] | None = None,
    *,
    dropout_p: float = 0.0,
    backend: str | None = None,
) -> Float[Tensor, "batch heads q_len d_k"]:
    """Attention on the chosen backend: ``backend`` argument > :func:`use_backend` > ``"auto"``.

    ``dropout_p`` is applied to the attention probabilities; pass 0.0 in evaluation.
    """
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    name = _resolve(backend if backend is not None else _override, query, key, value, mask, dropout_p)
    if name == "triton":
        from . import kernels

        return kernels.flash_attention(query, key, value, mask=mask, dropout_p=dropout_p)
    if name == "torch":
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p)
    dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None
    return attention.unchecked(query, key, value, mask, dropout)[0]  # shapes checked above


class MultiHeadedAttention(nn.Module):
    """Multi-Head Attention (section 3.2.2): h parallel heads of width d_k = d_model / h.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``. The projections of all heads are one
    Linear each (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``).

    ``backend`` is this module's default attention backend (``TransformerConfig.attention_backend``).
    Set ``record_attention = True`` to keep the last probabilities in ``self.attn`` (eager backend
    only, as the Annotated Transformer does for its visualisations).
    """

    def __init__(self, h: int, d_model: int, dropout: float = 0.1, *, backend: AttentionBackend = "auto") -> None:
        super().__init__()
        if d_model % h != 0:
            raise ValueError(f"h={h} does not divide d_model={d_model}")
        self.h, self.d_model, self.d_k = h, d_model, d_model // h
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout_p = dropout
        self.backend: str = _check_backend(backend)
        self.record_attention = False
        self.attn: Tensor | None = None

    def split_heads(self, x: Float[Tensor, "batch seq {self.d_model}"]) -> Float[Tensor, "batch {self.h} seq {self.d_k}"]:
        """(batch, seq, d_model) -> (batch, h, seq, d_k): each head sees its own d_k slice.

        Not checked itself: its results go straight into :meth:`attend`, whose contract checks them.
        """
        return rearrange(x, "b s (h d) -> b h s d", h=self.h)

    @checked
    def forward(
        self,
        query: Float[Tensor, "batch q_len {self.d_model}"],
        key: Float[Tensor, "batch k_len {self.d_model}"],
        value: Float[Tensor, "batch k_len {self.d_model}"],
        mask: Bool[Tensor, "#batch #q_len k_len"] | None = None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        q = self.split_heads(self.q_proj(query))
        k = self.split_heads(self.k_proj(key))
        v = self.split_heads(self.v_proj(value))
        return self.attend(q, k, v, mask)

    @checked
    def attend(
        self,
        q: Float[Tensor, "batch {self.h} q_len {self.d_k}"],
        k: Float[Tensor, "batch {self.h} k_len {self.d_k}"],
        v: Float[Tensor, "batch {self.h} k_len {self.d_k}"],
        mask: Bool[Tensor, "#batch #q_len k_len"] | None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        """Attention over already projected heads (as the KV cache supplies them), then W^O."""
        head_mask = None if mask is None else mask.unsqueeze(1)  # same mask for every head
        dropout_p = self.dropout_p if self.training else 0.0
        if self.record_attention:
            dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None
            x, self.attn = attention.unchecked(q, k, v, head_mask, dropout)  # shapes checked by this contract
        else:
            requested = _override or self.backend
            x = scaled_dot_product_attention.unchecked(q, k, v, head_mask, dropout_p=dropout_p, backend=requested)
        return self.out_proj(rearrange(x, "b h s d -> b s (h d)"))
