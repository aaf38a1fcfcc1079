"""The decoder: a stack of N identical layers with a third, cross-attention sub-layer (section 3.1).

The module that decodes; searching for a sequence with it (greedy, sampling, beam) is :mod:`transformer.decoding`.
"""

from __future__ import annotations

from torch import nn

from .attention import MultiHeadedAttention
from .cache import DecoderCache, LayerCache
from .config import NormPlacement
from .contracts import Bool, Float, Tensor, checked, validate_dtype_device
from .layers import LayerNorm, PositionwiseFeedForward, SublayerConnection, clones
from .masks import AttentionMask

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, attention over the encoder memory, then the FFN (3.1).

    ``src_mask`` must cover the memory: shape (batch, 1 or tgt_len, src_len), or an AttentionMask.
    With ``cache`` (incremental decoding), ``x`` holds only the new positions, which attend to every cached
    one and, among themselves, causally (``tgt_mask``, built by :class:`Decoder`).
    """

    def __init__(
        self,
        size: int,
        self_attn: MultiHeadedAttention,
        src_attn: MultiHeadedAttention,
        feed_forward: PositionwiseFeedForward,
        dropout: float,
        norm_placement: NormPlacement = "pre",
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.size, self.eps = size, eps
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout, norm_placement, eps), 3)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch tgt_len {self.size}"],
        memory: Float[Tensor, "batch src_len {self.size}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | AttentionMask | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | AttentionMask | None,
        cache: LayerCache | None = None,
    ) -> Float[Tensor, "batch tgt_len {self.size}"]:
        validate_dtype_device(
            "DecoderLayer.forward",
            lambda: self.sublayer[0].norm.weight,
            "the module's parameters",
            x=x,
            memory=memory,
            src_mask=src_mask,
            tgt_mask=tgt_mask,
        )
        m = memory
        self_cache, src_cache = (None, None) if cache is None else (cache.self_attn, cache.src_attn)
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask, cache=self_cache))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask, cache=src_cache))
        return self.sublayer[2](x, self.feed_forward)


class Decoder(nn.Module):
    """The decoder stack of N layers followed by a final LayerNorm (as torch.nn.Transformer's)."""

    def __init__(self, layer: DecoderLayer, N: int) -> None:
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size, layer.eps)
        self.size = layer.size

    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding with this stack."""
        return DecoderCache(len(self.layers))

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch tgt_len {self.size}"],
        memory: Float[Tensor, "batch src_len {self.size}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | AttentionMask | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | AttentionMask | None,
        cache: DecoderCache | None = None,
    ) -> Float[Tensor, "batch tgt_len {self.size}"]:
        """With ``cache``, ``x`` holds the positions after the cached ones and ``tgt_mask`` must be None: they
        attend to every cached position and causally among themselves. More than one new position at a time is
        taken only into an empty cache (a prompt), where causal is the whole rule."""
        validate_dtype_device(
            "Decoder.forward",
            lambda: self.layers[0].sublayer[0].norm.weight,  # what x meets first
            "the module's parameters",
            x=x,
            memory=memory,
            src_mask=src_mask,
            tgt_mask=tgt_mask,
        )
        if cache is not None:
            tgt_mask = cache.self_attention_mask(
                x.size(1), tgt_mask, layers=len(self.layers), who="Decoder", stack="the decoder", mask_name="tgt_mask"
            )
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, tgt_mask, None if cache is None else cache.layers[i])
        return self.norm(x)
