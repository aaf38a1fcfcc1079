"""The decoder: a stack of N identical layers with a third, cross-attention sub-layer (section 3.1)."""

from __future__ import annotations

from torch import nn

from .attention import MultiHeadedAttention
from .config import NormPlacement
from .contracts import Bool, Float, Tensor, checked
from .layers import LayerNorm, PositionwiseFeedForward, SublayerConnection, clones

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """One decoder layer: masked self-attention, attention over the encoder memory, then the FFN (3.1).

    ``src_mask`` must cover the memory: shape (batch, 1 or tgt_len, src_len).
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
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout, norm_placement, eps), 3)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch tgt_len {self.size}"],
        memory: Float[Tensor, "batch src_len {self.size}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | None,
    ) -> Float[Tensor, "batch tgt_len {self.size}"]:
        m = memory
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Decoder(nn.Module):
    """The decoder stack of N layers followed by a final LayerNorm (as torch.nn.Transformer's)."""

    def __init__(self, layer: DecoderLayer, N: int) -> None:
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size, layer.sublayer[0].norm.eps)
        self.size = layer.size

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch tgt_len {self.size}"],
        memory: Float[Tensor, "batch src_len {self.size}"],
        src_mask: Bool[Tensor, "#batch #tgt_len src_len"] | None,
        tgt_mask: Bool[Tensor, "#batch #tgt_len tgt_len"] | None,
    ) -> Float[Tensor, "batch tgt_len {self.size}"]:
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)
