"""The pieces of the decoder-only model that the encoder-decoder does not have.

* :class:`StandardizedNorm`: the functional transformer's ``standardize`` then ``elementwise_linear``,
  ``gain * (x - mean) / (std + eps) + bias`` (biased std, eps outside the square root).
* :class:`ScaledEmbeddings`: token embeddings times ``lambda_e`` (section 3.4 uses sqrt(d_model)).
* :class:`ScaledPositionalEncoding`, :class:`ScaledLearnedPositionalEncoding`: positions times ``lambda_pe``
  (section 3.5 uses 1), learned ones optionally starting at zero.
* :class:`DecoderOnlyLayer`: masked self-attention and the feed-forward network, each a residual sub-layer
  (section 3.1's decoder layer without the encoder-decoder attention).
"""

from __future__ import annotations

import torch
from torch import nn

from ..cache import KVCache
from ..config import NormPlacement
from ..contracts import Bool, Float, Int, Tensor, checked, validate_token_ids
from ..embeddings import Embeddings, LearnedPositionalEncoding, PositionalEncoding
from ..layers import LayerNorm, SublayerConnection, clones
from ..masks import AttentionMask
from .rms_norm import RMSNorm
from .rotary import Rotation

__all__ = [
    "StandardizedNorm",
    "ScaledEmbeddings",
    "ScaledPositionalEncoding",
    "ScaledLearnedPositionalEncoding",
    "DecoderOnlyLayer",
    "make_norm",
]


class StandardizedNorm(nn.Module):
    """``weight * (x - mean) / (std + eps) + bias`` over the last axis: the functional transformer's normalisation
    (``standardize``, biased std as ``jnp.std``, then an elementwise gain and bias). Compare
    :class:`~transformer.layers.LayerNorm`, which puts eps on the variance inside the square root.
    """

    def __init__(self, features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.features, self.eps = features, eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.features}"]) -> Float[Tensor, "*batch {self.features}"]:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, correction=0, keepdim=True)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


def make_norm(kind: str, features: int, eps: float, unit_offset: bool = False, *, wide_gain: bool = False) -> nn.Module:
    """``"layer"``: :class:`~transformer.layers.LayerNorm`; ``"std"``: :class:`StandardizedNorm`; ``"rms"``:
    :class:`~transformer.lm.rms_norm.RMSNorm` (``unit_offset``: Gemma's ``1 + weight`` gain; ``wide_gain``: OLMo 2's
    gain multiplied before the cast back)."""
    norms = {"layer": LayerNorm, "std": StandardizedNorm, "rms": RMSNorm}
    if kind not in norms:
        raise ValueError(f"norm must be 'layer', 'std' or 'rms', got {kind!r}")
    if wide_gain:  # OLMo 2's RMSNorm
        if kind != "rms" or unit_offset:
            raise ValueError(f"wide_gain=True is RMSNorm's (without unit_offset), got norm {kind!r}")
        return RMSNorm(features, eps, wide_gain=True)
    if unit_offset:
        if kind != "rms":
            raise ValueError(f"unit_offset=True is RMSNorm's (1 + weight) gain, got norm {kind!r}")
        return RMSNorm(features, eps, unit_offset=True)
    return norms[kind](features, eps)


class ScaledEmbeddings(Embeddings):
    """Learned token embeddings multiplied by ``scale`` (lambda_e; section 3.4's is sqrt(d_model)).

    Token ids outside ``[0, vocab)`` raise ValueError naming the id and the vocabulary size, checks on or off.
    """

    def __init__(self, d_model: int, vocab: int, scale: float, *, rounded: bool = False) -> None:
        super().__init__(d_model, vocab)
        self.scale, self.rounded = float(scale), rounded

    @checked
    def forward(self, x: Int[Tensor, "batch seq"]) -> Float[Tensor, "batch seq {self.d_model}"]:
        """``lambda_e * E[x]``; with ``rounded`` lambda_e is first rounded to the table's dtype (Gemma's
        ``embed_scale.to(weight.dtype)``: in bfloat16 sqrt(d_model) is not what float32 would multiply by)."""
        x = validate_token_ids(x, self.vocab, "tokens")  # on CUDA: clamped, checked asynchronously
        if self.rounded:
            return self.lut(x) * torch.tensor(self.scale, dtype=self.lut.weight.dtype, device=x.device)
        return self.lut(x) * self.scale


class ScaledPositionalEncoding(PositionalEncoding):
    """Sinusoidal positional encoding (section 3.5) multiplied by ``scale`` (lambda_pe): the table is fixed, so
    it is scaled once."""

    def __init__(self, d_model: int, dropout: float, max_len: int = 5000, scale: float = 1.0) -> None:
        super().__init__(d_model, dropout, max_len)
        self.scale = float(scale)
        self.pe.mul_(self.scale)


class ScaledLearnedPositionalEncoding(LearnedPositionalEncoding):
    """Learned positional encodings multiplied by ``scale`` (lambda_pe) when added; ``init="zeros"`` starts them
    at zero (the functional transformer's), ``"normal"`` at N(0, 0.02^2). The factor stays outside the parameter,
    so the gradients are those of ``x + lambda_pe * P``."""

    def __init__(
        self, d_model: int, dropout: float, max_len: int = 5000, scale: float = 1.0, init: str = "normal"
    ) -> None:
        super().__init__(d_model, dropout, max_len)
        if init not in ("normal", "zeros"):
            raise ValueError(f"positional init must be 'normal' or 'zeros', got {init!r}")
        self.scale, self.init = float(scale), init
        if init == "zeros":
            nn.init.zeros_(self.pe)

    def rows(self, offset: int, end: int) -> Tensor:
        """``lambda_pe`` times the rows for positions ``offset .. end - 1`` (added, then dropout, by ``forward``)."""
        return self.scale * self.pe[:, offset:end]

    def rows_at(self, positions: Tensor) -> Tensor:
        """``lambda_pe`` times the rows at ``positions`` (#batch, seq): a left-padded row's, or the cache's."""
        return self.scale * self.pe[0][positions]


class DecoderOnlyLayer(nn.Module):
    """One layer of the decoder-only model: masked self-attention, then the position-wise FFN, each a residual
    sub-layer with dropout and a normalisation (section 3.1's decoder layer without its encoder-decoder attention).

    ``self_attn`` is a :class:`~transformer.lm.attention.CausalSelfAttention` or a
    :class:`~transformer.lm.attention.PerHeadValueAttention`; ``norm`` picks LayerNorm (``"layer"``) or the
    functional transformer's :class:`StandardizedNorm` (``"std"``) inside both sub-layer connections.
    With ``cache``, ``x`` holds the new positions only and the attention appends their keys and values; ``rotation``
    (rotary positions) is handed to the attention. ``feed_forward`` may be the gated network
    (:class:`~transformer.lm.gated_feed_forward.GatedFeedForward`) and ``norm`` ``"rms"`` (RMSNorm).

    ``post_norm`` (Gemma's sandwich norms, Team Gemma 2024 section 2.2): each sub-layer's output is normalised too
    before the residual sum, ``x + Norm'(Sublayer(Norm(x)))`` (``post_norms[0]`` after attention, ``[1]`` after the
    feed-forward network); ``unit_offset`` makes every RMSNorm of the layer Gemma's ``1 + weight`` one.
    ``pre_norm=False`` with ``post_norm`` (OLMo 2's reordered norm, Team OLMo 2024): ``x + Norm'(Sublayer(x))``, no
    norm before the sub-layers (``sublayer[k].norm`` is the identity); ``wide_gain``: OLMo 2's RMSNorm.
    ``parallel`` (GPT-J, GPT-NeoX's ``use_parallel_residual``): ``x + Attn(Norm_1(x)) + FFN(Norm_2(x))``, both
    sub-layers reading the layer's input (pre-norm placement only).
    """

    def __init__(
        self,
        size: int,
        self_attn: nn.Module,
        feed_forward: nn.Module,
        dropout: float,
        norm_placement: NormPlacement = "pre",
        eps: float = 1e-6,
        norm: str = "layer",
        *,
        post_norm: bool = False,
        unit_offset: bool = False,
        parallel: bool = False,
        residual_scale: float = 1.0,
        pre_norm: bool = True,
        wide_gain: bool = False,
    ) -> None:
        super().__init__()
        self.size, self.eps = size, eps
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        if not pre_norm and not post_norm:
            raise ValueError("DecoderOnlyLayer: pre_norm=False needs post_norm=True (OLMo 2's x + Norm'(Sublayer(x)))")
        before = make_norm(norm, size, eps, unit_offset, wide_gain=wide_gain) if pre_norm else nn.Identity()
        self.sublayer = clones(SublayerConnection(size, dropout, norm_placement, eps, norm=before), 2)
        after = make_norm(norm, size, eps, unit_offset, wide_gain=wide_gain)
        self.post_norms = clones(after, 2) if post_norm else None
        self.parallel = parallel
        self.residual_scale = float(residual_scale)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch seq {self.size}"],
        mask: Bool[Tensor, "#batch #seq k_len"] | AttentionMask | None,
        cache: KVCache | None = None,
        rotation: Rotation | None = None,
    ) -> Float[Tensor, "batch seq {self.size}"]:
        post = self.post_norms
        if self.parallel:  # GPT-NeoX's x + Attn(Norm_1(x)) + FFN(Norm_2(x)), summed in transformers' order
            first, second = self.sublayer
            attended = first.dropout(self.self_attn(first.norm(x), mask, cache=cache, rotation=rotation))
            return second.dropout(self.feed_forward(second.norm(x))) + attended + x
        if self.residual_scale != 1.0:  # Granite's x + r * Sublayer(Norm(x))
            r = self.residual_scale
            x = self.sublayer[0](x, lambda x: self.self_attn(x, mask, cache=cache, rotation=rotation) * r)
            return self.sublayer[1](x, lambda x: self.feed_forward(x) * r)
        if post is None:
            x = self.sublayer[0](x, lambda x: self.self_attn(x, mask, cache=cache, rotation=rotation))
            return self.sublayer[1](x, self.feed_forward)
        x = self.sublayer[0](x, lambda x: post[0](self.self_attn(x, mask, cache=cache, rotation=rotation)))
        return self.sublayer[1](x, lambda x: post[1](self.feed_forward(x)))
