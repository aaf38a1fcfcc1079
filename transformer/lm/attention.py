"""Causal self-attention of the decoder-only model, in its two forms, with a score temperature tau.

* :class:`CausalSelfAttention`: the paper's multi-head attention (section 3.2.2) with W^O, masked so that each
  position attends to itself and earlier ones (section 3.2.3), the scores multiplied by ``scale`` (tau).
* :class:`PerHeadValueAttention`: the functional transformer's. Each head ``i`` maps the input straight to
  d_model with its own ``W_i`` (d_model x d_model) and bias ``b_i``, and the heads are summed (no W^O):
  ``sum_i softmax(tau * Q_i K_i^T + causal) (X W_i + b_i)``. The W^O form is the special case ``W_i = W^V_i W^O_i``
  (rank d_k), ``b_i = b^V_i W^O_i`` (``tests/test_lm.py`` maps one into the other).
* Both take the blocks of today's checkpoints (docs/lm_blocks.md): ``qk_norm`` (RMSNorm on each head's queries and
  keys), a :class:`~transformer.lm.rotary.Rotation` (RoPE) per forward, and :class:`AttentionHeads`' ``d_k``
  (``head_dim``), ``qkv_bias`` and ``out_bias`` (the W^O form only).

Attention is linear in the values, so the per-head form attends with the *shared* input as value and applies
each head's map afterwards: ``A_i (X W_i + 1 b_i^T) = (A_i X) W_i + (A_i 1) b_i^T``. The cache then holds X once
(not one d_model-wide value per head), split into ``heads`` chunks of width d_k, the shape of the keys. The
column ``A_i 1`` (1 on every query row with a key, 0 on padded rows, the dropped-out mass under dropout) comes
from one more value column of ones, so the identity is exact in every case.

The fused kernel needs values as wide as the keys (d_v = d_k): on the ``triton`` backend each head attends every
d_k-wide chunk of ``[X, 1, 0...]`` as its own problem (``heads * (heads + 1)`` problems of width d_k, the
queries and keys repeated), the eager and torch backends take the (d_model + 1)-wide value directly. Both do the
same work on the values; the kernel recomputes each head's scores once per chunk (see docs/lm.md, "Per-head
values on the fused kernel"). Dropout on the probabilities is drawn per problem by the kernel, which would give
each chunk its own mask: ``triton`` refuses the per-head form with attention dropout, ``auto`` picks ``torch``.

Both are :class:`LMSelfAttention` (``forward(x, mask, cache=...)``, tau), whose machinery (projections, key/value
cache, the mask per head, the attend step on a backend) is :class:`~transformer.attention.AttentionHeads`', the
same as :class:`~transformer.attention.MultiHeadedAttention`'s.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..attention import AttentionHeads
from ..backends import current_backend, refuse, repeat_kv_heads, resolve_backend, run_backend
from ..cache import KVCache
from ..contracts import Bool, Float, Tensor, checked, validate_dtype_device
from ..masks import AttentionMask
from .rms_norm import RMSNorm
from .rotary import Rotation

__all__ = ["CausalSelfAttention", "PerHeadValueAttention", "LMSelfAttention", "window_keys"]


class LMSelfAttention(AttentionHeads):
    """Self-attention of the decoder-only model: one input ``x`` gives queries, keys and values, and the scores are
    multiplied by a temperature ``scale`` (tau; default the paper's 1/sqrt(d_k)). Its subclasses are the two value
    forms, each with its checked ``attend(q, k, values, mask)``; the causal mask comes from the model. The heads'
    machinery is :class:`~transformer.attention.AttentionHeads`.
    """

    def __init__(
        self,
        h: int,
        d_model: int,
        dropout: float = 0.0,
        *,
        qk_norm: bool = False,
        qk_norm_eps: float = 1e-6,
        qk_norm_unit_offset: bool = False,
        qk_norm_scope: str = "head",
        qk_norm_wide_gain: bool = False,
        **heads,
    ) -> None:
        super().__init__(h, d_model, dropout, **heads)
        self.qk_norm = qk_norm
        if qk_norm_scope not in ("head", "projection"):
            raise ValueError(f"qk_norm_scope must be 'head' or 'projection', got qk_norm_scope={qk_norm_scope!r}")
        self.qk_norm_scope = qk_norm_scope
        if qk_norm:  # Gemma 3's: the (1 + weight) RMSNorm; OLMo's: over the whole projection (see prepare_heads)
            whole = qk_norm_scope == "projection"
            q_width, k_width = (self.d_heads, self.kv_heads * self.d_k) if whole else (self.d_k, self.d_k)
            norm = dict(unit_offset=qk_norm_unit_offset, wide_gain=qk_norm_wide_gain)
            self.q_norm = RMSNorm(q_width, qk_norm_eps, **norm)
            self.k_norm = RMSNorm(k_width, qk_norm_eps, **norm)

    def default_scale(self) -> float:
        """tau as a number, the paper's 1/sqrt(d_k): the language model always multiplies its scores by it."""
        return 1.0 / math.sqrt(self.d_k)

    def prepare_heads(self, q: Tensor, k: Tensor | None, rotation: Rotation | None) -> tuple[Tensor, Tensor | None]:
        """QK-norm (``q_norm``/``k_norm``: RMSNorm over each head's d_k, as Qwen3; Henry et al. 2020 normalise
        queries and keys the same way; with ``qk_norm_scope="projection"`` over all the heads at once, OLMo's), then
        RoPE's ``rotation`` (:mod:`~transformer.lm.rotary`), before the keys enter the cache."""
        if self.qk_norm and self.qk_norm_scope == "projection":  # OLMo 2, OLMoE: one norm over all the heads
            q, k = self._whole(self.q_norm, q), None if k is None else self._whole(self.k_norm, k)
        elif self.qk_norm:
            q, k = self.q_norm(q), None if k is None else self.k_norm(k)
        if rotation is not None:
            q, k = rotation(q), None if k is None else rotation(k)
        return q, k

    @staticmethod
    def _whole(norm: RMSNorm, x: Tensor) -> Tensor:
        """``norm`` over every head of ``x`` (batch, heads, seq, d_k) at once, as over the projection before the
        split (Team OLMo 2024; transformers' ``q_norm(q_proj(x))``): the heads joined (a view of the projection's
        output, so the sums run in its order), normalised, split again."""
        batch, heads, seq, d_k = x.shape  # torch views, not einops (0.8.0 imports torch._dynamo at its first call)
        joined = norm(x.transpose(1, 2).reshape(batch, seq, heads * d_k))
        return joined.view(batch, seq, heads, d_k).transpose(1, 2)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch seq {self.d_model}"],
        mask: Bool[Tensor, "#batch #seq k_len"] | AttentionMask | None,
        *,
        cache: KVCache | None = None,
        rotation: Rotation | None = None,
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``x`` holds the new positions; with ``cache`` they attend to every cached one too (``mask`` covers all).
        ``rotation`` (rotary positions) turns the new queries and keys by their positions. Past a sliding window
        (a cached step's mask), only the keys the window lets a new query see are attended (:func:`window_keys`)."""
        validate_dtype_device(
            f"{type(self).__name__}.forward", lambda: next(self.parameters()), "the module's parameters", x=x, mask=mask
        )
        q, k, v = self.project(x, x, x, cache, rotation)
        return self.attend(q, *window_keys(q, k, v, mask))


def window_keys(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | AttentionMask | None
) -> tuple[Tensor, Tensor, Tensor | AttentionMask | None]:
    """The keys, values and mask of a cached step (``mask`` of key padding and ``window_left`` only, the queries the
    last positions) cut to the last ``q_len + window_left`` keys, the only ones any new query may see: transformers'
    sliding-window cache hands its attention just those, so the same function rounds the same way in half precision
    (sdpa's sums over the masked keys run in another order). With one query the window then hides nothing and is
    dropped (the mask is the key padding alone, or none); other masks, and symbolic lengths under tracing, unchanged."""
    if not isinstance(mask, AttentionMask) or mask.window_left is None or mask.window_right is not None:
        return k, v, mask
    if mask.causal or set(mask.named_parts()) - {"key_mask"}:  # key lengths, documents...: another mask
        return k, v, mask
    q_len, k_len, keep = q.size(2), k.size(2), q.size(2) + mask.window_left
    if not isinstance(k_len, int) or not isinstance(q_len, int) or k_len <= keep:
        return k, v, mask
    key_mask = None if mask.key_mask is None else mask.key_mask[:, -keep:]
    parts = {"key_mask": key_mask, "window_left": mask.window_left if q_len > 1 else None}
    cut = AttentionMask(**{name: part for name, part in parts.items() if part is not None})
    return k[:, :, -keep:], v[:, :, -keep:], None if cut.is_empty() else cut


class CausalSelfAttention(LMSelfAttention):
    """Masked multi-head self-attention (sections 3.2.2 and 3.2.3) with W^O and a score temperature.

    ``MultiHead(X) = Concat(head_1, ..., head_h) W^O``, ``head_i = softmax(tau * Q_i K_i^T + M) V_i``, where ``M``
    hides later positions and ``tau`` is ``scale`` (default 1/sqrt(d_k), the paper's). The projections, the
    key/value cache and grouped-query attention (``kv_heads``) are those of
    :class:`~transformer.attention.MultiHeadedAttention` (both are :class:`~transformer.attention.AttentionHeads`).
    """

    @checked
    def attend(
        self,
        q: Float[Tensor, "batch {self.h} q_len {self.d_k}"],
        k: Float[Tensor, "batch {self.kv_heads} k_len {self.d_k}"],
        v: Float[Tensor, "batch {self.kv_heads} k_len {self.d_k}"],
        mask: Bool[Tensor, "#batch #q_len k_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        """Attention over projected heads (d_k wide each; ``head_dim`` may make h * d_k differ from d_model) with
        the score scale tau, then W^O (h * d_k -> d_model)."""
        return self.combine_heads(self.attend_heads(q, k, v, self.heads_mask(mask, q, k)))


class PerHeadValueAttention(LMSelfAttention):
    """Masked multi-head self-attention whose heads map values straight to d_model and are summed (no W^O), the
    functional transformer's: ``sum_i softmax(tau * Q_i K_i^T + M) (X W_i + b_i)`` (see the module docstring).

    ``q_proj``/``k_proj`` hold every head's d_k-wide query and key maps (as in MultiHeadedAttention);
    ``value_weight`` (heads, d_model, d_model) and ``value_bias`` (heads, d_model) are the W_i (used as ``x @ W_i``)
    and b_i. The cache holds the keys and the shared input X, in ``heads`` chunks of width d_k.
    """

    def __init__(self, h: int, d_model: int, dropout: float = 0.0, **options) -> None:
        super().__init__(h, d_model, dropout, **options)
        if self.d_heads != d_model or not (self.qkv_bias and self.out_bias) or self.kv_heads != h:
            raise ValueError(
                f"PerHeadValueAttention: the per-head value form needs d_k = d_model / h, biases and one key/value "
                f"head per query head, got d_k={self.d_k}, qkv_bias={self.qkv_bias}, out_bias={self.out_bias}, "
                f"kv_heads={self.kv_heads}"
            )
        for w in self.value_weight:
            nn.init.xavier_uniform_(w)

    def build_value_maps(self) -> None:
        """Each head's W_i (d_model x d_model) and b_i, in place of W^V and W^O."""
        self.value_weight = nn.Parameter(torch.empty(self.h, self.d_model, self.d_model))
        self.value_bias = nn.Parameter(torch.zeros(self.h, self.d_model))

    def value_heads(self, value: Tensor) -> Tensor:
        """The shared input X itself, split into ``heads`` chunks of width d_k (the shape of the keys)."""
        return self.split_heads(value)

    @checked
    def attend(
        self,
        q: Float[Tensor, "batch {self.h} q_len {self.d_k}"],
        k: Float[Tensor, "batch {self.h} k_len {self.d_k}"],
        shared: Float[Tensor, "batch {self.h} k_len {self.d_k}"],
        mask: Bool[Tensor, "#batch #q_len k_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch q_len {self.d_model}"]:
        """``U_i = A_i [X, 1]`` for every head, then ``sum_i U_i[:, :d_model] W_i + U_i[:, d_model] b_i``."""
        mask = self.heads_mask(mask, q, k)
        dropout_p = self.dropout_p if self.training else 0.0
        batch, h, k_len, d_k = shared.shape
        ones = torch.ones(batch, 1, k_len, 1, dtype=shared.dtype, device=shared.device)
        if self.record_attention:
            name = "eager"
        else:
            name = resolve_backend(current_backend() or self.backend, q, k, shared, mask, dropout_p, self.scale)
        if name == "triton":
            if dropout_p > 0:
                if (current_backend() or self.backend) != "auto":
                    name = refuse(
                        "attention backend 'triton' cannot run these inputs: the per-head value form "
                        "with attention dropout (the kernel would draw one dropout mask per d_k-wide "
                        "value chunk); use the torch or eager backend, or attention_dropout=0"
                    )
                else:
                    name = "torch"
        if name == "triton":  # h x (h + 1) problems of width d_k: chunk c of [X, 1, 0...] for every head i
            extra = torch.cat([ones, ones.new_zeros(batch, 1, k_len, d_k - 1)], dim=-1)
            chunks = torch.cat([shared, extra], dim=1)  # (batch, h + 1, k_len, d_k)
            values = chunks.unsqueeze(1).expand(-1, h, -1, -1, -1).reshape(batch, h * (h + 1), k_len, d_k)
            q, k = repeat_kv_heads(q, k, h * (h + 1))  # each head h + 1 times in a row: head i, chunk c at i(h+1)+c
            u = run_backend("triton", q, k, values, mask, dropout_p, self.scale)
            u = u.view(batch, h, h + 1, -1, d_k).transpose(2, 3).reshape(batch, h, -1, (h + 1) * d_k)
            u = u[..., : self.d_model + 1]  # head i's chunks side by side: (batch, h, q_len, (h + 1) d_k)
        else:
            joined = shared.transpose(1, 2).reshape(batch, 1, k_len, -1)  # (batch, 1, k_len, d_model): the chunks
            values = torch.cat([joined, ones], dim=-1).expand(-1, h, -1, -1)
            u = self.attend_heads(q, k, values, mask, name)
        out = torch.einsum("bisd,ide->bse", u[..., : self.d_model], self.value_weight)
        return out + torch.einsum("bis,ie->bse", u[..., self.d_model], self.value_bias)
