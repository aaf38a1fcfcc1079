"""The pieces every layer is built of: LayerNorm, the residual sub-layer connection, the FFN."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import Activation, NormPlacement
from .contracts import Float, Tensor, checked

__all__ = ["clones", "LayerNorm", "SublayerConnection", "PositionwiseFeedForward", "residual", "ACTIVATIONS"]

#: The feed-forward networks' activations by name: ReLU (the paper's), GELU (Hendrycks and Gimpel 2016, erf form),
#: its tanh approximation (torch's fused kernel, Hugging Face's ``gelu_pytorch_tanh``), the same formula written out
#: operation by operation as GPT-2's ``gelu_new`` (transformers' ``NewGELUActivation``: equal in float32 and float64
#: within rounding, but in bfloat16 and float16 each operation rounds, so only this form gives GPT-2's half-precision
#: outputs) and SiLU (swish; SwiGLU's).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "gelu_new": lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),
}


def clones(module: nn.Module, N: int) -> nn.ModuleList:
    """N independent deep copies of ``module`` (the encoder and decoder stacks, section 3.1)."""
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


class LayerNorm(nn.Module):
    """Layer normalization (Ba et al. 2016), used around every sub-layer (section 3.1).

    Follows ``torch.nn.LayerNorm``'s arithmetic: ``weight * (x - mean) / sqrt(var + eps) + bias``
    with the *biased* variance and eps inside the square root (the Annotated Transformer used
    the unbiased std plus eps outside it), and runs on torch's fused kernel (``F.layer_norm``), one
    operation forward and one backward. A constant row gives ``bias``, never NaN.
    """

    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.features, self.eps = features, eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.features}"]) -> Float[Tensor, "*batch {self.features}"]:
        if x.ndim and x.shape[-1] == self.features and x.dtype == self.weight.dtype:
            return F.layer_norm(x, (self.features,), self.weight, self.bias, self.eps)
        # The same formula written out, where F.layer_norm refuses what it has always taken: mixed dtypes (promoted),
        # and, with checks off, a last axis of size 1 (broadcast; the contract refuses it when checks are on).
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


@checked
def residual(
    x: Float[Tensor, "*batch d_model"], sublayer_out: Float[Tensor, "*batch d_model"]
) -> Float[Tensor, "*batch d_model"]:
    """The residual connection x + Sublayer(x): both operands must have the same shape."""
    return x + sublayer_out


class SublayerConnection(nn.Module):
    """A residual connection around a sub-layer, with dropout and LayerNorm (section 3.1, 5.4).

    ``norm_placement="post"`` is the paper's ``LayerNorm(x + Dropout(Sublayer(x)))``;
    ``"pre"`` is the Annotated Transformer's ``x + Dropout(Sublayer(LayerNorm(x)))``. ``norm`` replaces the
    ``LayerNorm(size, eps)`` with another normalisation of ``size`` features (the language model's ``"std"``).
    """

    def __init__(
        self,
        size: int,
        dropout: float,
        norm_placement: NormPlacement = "pre",
        eps: float = 1e-6,
        *,
        norm: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be 'pre' or 'post', got {norm_placement!r}")
        self.size, self.norm_placement = size, norm_placement
        self.norm = LayerNorm(size, eps) if norm is None else norm
        self.dropout = nn.Dropout(dropout)

    @checked
    def forward(
        self, x: Float[Tensor, "batch seq {self.size}"], sublayer: Callable[[Tensor], Tensor]
    ) -> Float[Tensor, "batch seq {self.size}"]:
        if self.norm_placement == "pre":
            return residual(x, self.dropout(sublayer(self.norm(x))))
        return self.norm(residual(x, self.dropout(sublayer(x))))


class PositionwiseFeedForward(nn.Module):
    """Position-wise feed-forward network (section 3.3): ``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``.

    ``activation`` is any name of :data:`ACTIVATIONS` (ReLU is the paper's); ``bias=False`` drops b_1 and b_2."""

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.1, activation: Activation | str = "relu", *, bias: bool = True
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
        self.d_model, self.activation = d_model, activation
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.d_model}"]:
        act = ACTIVATIONS[self.activation]
        return self.w_2(self.dropout(act(self.w_1(x))))
