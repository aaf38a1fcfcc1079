"""Multi-head attention (section 3.2.2), with an optional key/value cache for incremental decoding.

The attention reference and its backends are in :mod:`transformer.backends`, the drop-in for
``F.scaled_dot_product_attention`` in :mod:`transformer.backends.sdpa` (re-exported here: ``attention``,
``scaled_dot_product_attention``, ``use_backend``). The module is callable: ``transformer.attention(q, k, v)``
calls the reference function :func:`attention`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch
from torch import nn

from .backends import (
    BACKENDS,
    TRITON_INSTALL_HINT,
    attention,
    check_backend_name,
    current_backend,
    dense_heads_mask,
    repeat_kv_heads,
    resolve_backend,
    run_heads,
    scaled_dot_product_attention,
    score_modifiers,
    triton_missing_reason,
    use_backend,
)
from .backends.score_mods import check_score_modifiers
from .cache import KVCache
from .common.arguments import is_int
from .config import AttentionBackend, check_kv_heads
from .contracts import Bool, Float, Tensor, checked, validate_dtype_device
from .masks import AttentionMask

__all__ = [
    "attention",
    "scaled_dot_product_attention",
    "use_backend",
    "current_backend",
    "MultiHeadedAttention",
    "BACKENDS",
    "TRITON_INSTALL_HINT",
    "triton_missing_reason",
]


class AttentionHeads(nn.Module):
    """What every multi-head attention module shares (section 3.2.2): h heads of width d_k = d_model / h.

    ``d_k`` given decouples the heads' width from d_model (Qwen3: 16 heads of 128 with d_model 1024): queries map
    d_model -> h * d_k (``d_heads``) and W^O maps h * d_k -> d_model. ``qkv_bias``/``out_bias`` switch the biases of
    the q/k/v projections and of W^O (Qwen2 has the first, Llama neither). The defaults are the paper's.

    Queries are projected by ``q_proj`` into h heads, keys by ``k_proj`` into ``kv_heads`` heads (default ``h``;
    fewer is grouped-query attention), values by the maps :meth:`build_value_maps` makes (``v_proj`` into
    ``kv_heads`` heads, and ``out_proj`` = W^O over the concatenated heads). The step every form runs is
    :meth:`attend_heads`: ``softmax(scale * Q K^T, masked) V`` per head on the chosen backend, or on the eager reference
    with the probabilities kept in ``self.attn`` (``record_attention``). ``scale`` None is the paper's 1/sqrt(d_k).
    The score modifiers of :mod:`transformer.backends.score_mods`: ``softcap`` c turns the scaled scores into
    ``c * tanh(s / c)`` (Gemma 2); ``alibi_slopes`` (h,) float adds ``-slope_h * |p(i) - j|`` (ALiBi, Press et al.
    2022; :func:`~transformer.backends.alibi_slopes` gives the standard ones), kept as a non-persistent buffer (it
    follows ``.to()``; state dicts are unchanged). ``sinks=True``: a learned parameter ``sinks`` (h,), one logit per
    query head in each softmax's denominator (gpt-oss's attention sinks; docs/attention.md, "Attention sinks"),
    zeros at first, on every backend.
    Subclasses give the call signature: :class:`MultiHeadedAttention` (query, key, value) and the language model's
    self-attentions (:mod:`transformer.lm.attention`); a subclass with other value maps overrides
    :meth:`build_value_maps` and :meth:`value_heads`.
    """

    def __init__(
        self,
        h: int,
        d_model: int,
        dropout: float = 0.1,
        *,
        scale: float | None = None,
        backend: AttentionBackend = "auto",
        kv_heads: int | None = None,
        d_k: int | None = None,
        qkv_bias: bool = True,
        out_bias: bool = True,
        softcap: float | None = None,
        alibi_slopes: Tensor | None = None,
        sinks: bool = False,
    ) -> None:
        super().__init__()
        if d_k is None and d_model % h != 0:
            raise ValueError(f"h={h} does not divide d_model={d_model}")
        if d_k is not None and not is_int(d_k, at_least=1):
            raise ValueError(f"d_k must be a positive int or None, got d_k={d_k!r}")
        self.h, self.d_model = h, d_model
        self.d_k = d_model // h if d_k is None else d_k
        self.d_heads = h * self.d_k
        self.kv_heads = check_kv_heads(kv_heads, h)
        self.qkv_bias, self.out_bias = qkv_bias, out_bias
        self.q_proj = nn.Linear(d_model, self.d_heads, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, self.kv_heads * self.d_k, bias=qkv_bias)
        self.build_value_maps()
        self.dropout_p = dropout
        self.scale = self.default_scale() if scale is None else float(scale)
        self.backend: str = check_backend_name(backend)
        device = alibi_slopes.device if isinstance(alibi_slopes, Tensor) else None
        check_score_modifiers(type(self).__name__, softcap, alibi_slopes, 1, h, device)
        self.softcap = softcap
        self.alibi_slopes: Tensor | None
        self.register_buffer("alibi_slopes", alibi_slopes, persistent=False)
        if not isinstance(sinks, bool):
            raise ValueError(
                f"{type(self).__name__}: sinks must be a bool (learned attention sinks or none), got {sinks!r}"
            )
        self.sinks = nn.Parameter(torch.zeros(h)) if sinks else None
        self.record_attention = False
        self.attn: Tensor | None = None

    def default_scale(self) -> float | None:
        """The score scale when none is given: None, the paper's 1/sqrt(d_k) as each backend computes it."""
        return None

    def build_value_maps(self) -> None:
        """W^V (``v_proj``: d_model -> kv_heads * d_k) and W^O (``out_proj``: h * d_k -> d_model)."""
        self.v_proj = nn.Linear(self.d_model, self.kv_heads * self.d_k, bias=self.qkv_bias)
        self.out_proj = nn.Linear(self.d_heads, self.d_model, bias=self.out_bias)

    def split_heads(
        self, x: Float[Tensor, "batch seq {self.d_heads}"]
    ) -> Float[Tensor, "batch {self.h} seq {self.d_k}"]:
        """(batch, seq, h * d_k) -> (batch, h, seq, d_k): each head sees its own d_k slice.

        Not checked itself: its results go straight into ``attend``, whose contract checks them. Plain torch views,
        no einops: einops 0.8.0 (the oldest the package takes) imports ``torch._dynamo`` at its first call.
        """
        return x.unflatten(-1, (self.h, -1)).transpose(1, 2)

    def split_kv_heads(self, x: Tensor) -> Float[Tensor, "batch {self.kv_heads} seq {self.d_k}"]:
        """(batch, seq, kv_heads * d_k) -> (batch, kv_heads, seq, d_k): the projected keys or values (checked, as
        :meth:`split_heads`' results, by ``attend``)."""
        return x.unflatten(-1, (self.kv_heads, -1)).transpose(1, 2)

    def value_heads(self, value: Tensor) -> Tensor:
        """The values as heads: ``value`` (batch, k_len, d_model) through W^V, split into ``kv_heads`` heads."""
        return self.split_kv_heads(self.v_proj(value))

    def project(
        self, query: Tensor, key: Tensor, value: Tensor, cache: KVCache | None, rotation: Any = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values as heads, queries and keys through :meth:`prepare_heads` (with ``rotation``).
        With ``cache`` the new keys and values are appended to it (or, for a static cache already filled, the cached
        ones are used: cross-attention's memory) and all it holds returned."""
        q = self.split_heads(self.q_proj(query))
        if cache is not None and cache.filled:
            return self.prepare_heads(q, None, rotation)[0], cache.keys, cache.values
        k, v = self.split_kv_heads(self.k_proj(key)), self.value_heads(value)
        q, k = self.prepare_heads(q, k, rotation)
        if cache is not None:
            k, v = cache.extend(k, v)
        return q, k, v

    def prepare_heads(self, q: Tensor, k: Tensor | None, rotation: Any) -> tuple[Tensor, Tensor | None]:
        """What queries and keys (as heads) go through before attention and the cache: nothing here; the language
        model's attention normalises them (QK-norm) and rotates them (RoPE) by ``rotation``."""
        return q, k

    @staticmethod
    def heads_mask(mask: Tensor | AttentionMask | None, q: Tensor, k: Tensor) -> Tensor | AttentionMask | None:
        """The mask as the backends take it for (batch, heads, len, d) ``q`` and ``k``: an AttentionMask checked
        against them, or a dense (#batch, #q_len, k_len) mask given a heads axis (the same mask for every head)."""
        if isinstance(mask, AttentionMask):
            mask.check_fits(q.size(0), q.size(2), k.size(2))
            return mask
        return None if mask is None else mask.unsqueeze(1)

    def attend_heads(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None, backend: str | None = None
    ) -> Tensor:
        """``softmax(scale * q k^T, masked) v`` for every head: (batch, h, q_len, d_v), key/value heads shared by their
        query group. ``mask`` as :meth:`heads_mask` gives it. On ``backend`` when given (already resolved), else on
        the innermost ``use_backend`` block's or the module's; with ``record_attention``, on the eager reference,
        keeping the probabilities in ``self.attn``. Dropout on the probabilities in training mode only."""
        dropout_p = self.dropout_p if self.training else 0.0
        modifiers = self.score_modifiers()
        if self.record_attention:
            dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None
            k, v = repeat_kv_heads(k, v, self.h)
            x, self.attn = attention.unchecked(
                q, k, v, dense_heads_mask(mask, q.size(2), k.size(2)), dropout, self.scale, **modifiers
            )
            return x
        if backend is None:
            requested = current_backend() or self.backend
            backend = resolve_backend(requested, q, k, v, mask, dropout_p, self.scale, **modifiers)
        return run_heads(backend, q, k, v, mask, dropout_p, self.scale, **modifiers)

    def score_modifiers(self) -> dict:
        """The module's score modifiers and sinks as keyword arguments, only those given (``softcap``,
        ``alibi_slopes``, ``sinks``)."""
        return score_modifiers(self.softcap, self.alibi_slopes, self.sinks)

    def combine_heads(self, x: Tensor) -> Tensor:
        """W^O over the concatenated heads: (batch, h, q_len, d_k) -> (batch, q_len, h * d_k) -> (batch, q_len,
        d_model)."""
        return self.out_proj(x.transpose(1, 2).flatten(2))


class MultiHeadedAttention(AttentionHeads):
    """Multi-Head Attention (section 3.2.2): h parallel heads of width d_k = d_model / h.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``. The projections of all heads are one
    Linear each (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``).

    ``kv_heads`` (default ``h``) gives grouped-query attention (GQA; multi-query attention with ``kv_heads=1``):
    keys and values get ``kv_heads`` heads of width d_k, shared by groups of ``h / kv_heads`` query heads (query head
    i reads key/value head ``i // (h / kv_heads)``), so ``k_proj``/``v_proj`` map d_model to ``kv_heads * d_k`` and a
    cache holds ``kv_heads`` heads. The kernel reads the shared heads in place and torch's function gets
    ``enable_gqa``; only the eager reference repeats them.

    ``backend`` is this module's default attention backend (``TransformerConfig.attention_backend``); a
    :func:`use_backend` block overrides it. Set ``record_attention = True`` to keep the last probabilities
    in ``self.attn`` (computed by the eager reference, as the Annotated Transformer does for its pictures).
    ``scale`` (default None: 1/sqrt(d_k)) multiplies the scores. The machinery is :class:`AttentionHeads`'.

    With ``cache`` (a :class:`~transformer.cache.KVCache`), ``key``/``value`` hold only the new positions:
    their projections are appended to the cache (self-attention) or, for a static cache, computed once from
    the memory and reused (cross-attention), and the queries attend to every position the cache holds.
    """

    @checked
    def forward(
        self,
        query: Float[Tensor, "batch q_len {self.d_model}"],
        key: Float[Tensor, "batch k_len {self.d_model}"],
        value: Float[Tensor, "batch k_len {self.d_model}"],
        mask: Bool[Tensor, "..."] | AttentionMask | None = None,  # noqa: UP037 (a jaxtyping shape: any)
        *,
        cache: KVCache | None = None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        """``mask`` covers the keys attended (the ``k_len`` new positions, or with a cache every cached one), so
        :meth:`attend` checks its shape against them: (#batch, #q_len, keys attended). Inputs and mask must be on the
        module's device, and the inputs of its dtype (ValueError naming the argument)."""
        validate_dtype_device(
            "MultiHeadedAttention.forward",
            lambda: self.q_proj.weight,
            "the module's parameters",
            query=query,
            key=key,
            value=value,
            mask=mask,
        )
        return self.attend(*self.project(query, key, value, cache), mask)

    @checked
    def attend(
        self,
        q: Float[Tensor, "batch {self.h} q_len {self.d_k}"],
        k: Float[Tensor, "batch {self.kv_heads} k_len {self.d_k}"],
        v: Float[Tensor, "batch {self.kv_heads} k_len {self.d_k}"],
        mask: Bool[Tensor, "#batch #q_len k_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        """Attention over projected heads (the same mask for every head), then W^O."""
        return self.combine_heads(self.attend_heads(q, k, v, self.heads_mask(mask, q, k)))


class _CallableModule(types.ModuleType):
    """``transformer.attention`` is this module; calling it calls :func:`attention` (the reference function), so
    ``tt.attention(q, k, v, mask)`` keeps working without the function's name shadowing the module's. Inside a
    function compiled with torch.compile call the function itself (``from transformer.attention import attention``):
    Dynamo cannot call a module object (a graph break, an error under ``fullgraph=True``)."""

    def __call__(self, *args, **kwargs):
        return attention(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
