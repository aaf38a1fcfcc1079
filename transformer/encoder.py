"""The encoder: a stack of N identical layers (section 3.1)."""

from __future__ import annotations

from torch import nn

from .attention import MultiHeadedAttention
from .config import NormPlacement
from .contracts import Bool, Float, Tensor, checked, validate_dtype_device
from .layers import LayerNorm, PositionwiseFeedForward, SublayerConnection, clones
from .masks import AttentionMask

__all__ = ["EncoderLayer", "Encoder"]


class EncoderLayer(nn.Module):
    """One encoder layer: self-attention, then a position-wise FFN, each a residual sub-layer (3.1)."""

    def __init__(
        self,
        size: int,
        self_attn: MultiHeadedAttention,
        feed_forward: PositionwiseFeedForward,
        dropout: float,
        norm_placement: NormPlacement = "pre",
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.size, self.eps = size, eps
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout, norm_placement, eps), 2)

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch src_len {self.size}"],
        mask: Bool[Tensor, "#batch #src_len src_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch src_len {self.size}"]:
        validate_dtype_device(
            "EncoderLayer.forward", lambda: self.sublayer[0].norm.weight, "the module's parameters", x=x, mask=mask
        )
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class Encoder(nn.Module):
    """The encoder stack of N layers followed by a final LayerNorm (as torch.nn.Transformer's)."""

    def __init__(self, layer: EncoderLayer, N: int) -> None:
        super().__init__()
        self.layers = clones(layer, N)
        self.norm = LayerNorm(layer.size, layer.eps)
        self.size = layer.size

    @checked
    def forward(
        self,
        x: Float[Tensor, "batch src_len {self.size}"],
        mask: Bool[Tensor, "#batch #src_len src_len"] | AttentionMask | None,
    ) -> Float[Tensor, "batch src_len {self.size}"]:
        validate_dtype_device(
            "Encoder.forward",
            lambda: self.layers[0].sublayer[0].norm.weight,  # what x meets first
            "the module's parameters",
            x=x,
            mask=mask,
        )
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)
