"""RMSNorm (Zhang and Sennrich 2019, "Root Mean Square Layer Normalization", equation 4): the layer normalisation
of Llama, Mistral and Qwen, without re-centring and without a bias; with ``unit_offset`` Gemma's, whose gain is
``1 + weight`` (Team Gemma 2024, the ``gemma_pytorch`` RMSNorm)."""

from __future__ import annotations

import torch
from torch import nn

from ..contracts import Float, Tensor, checked

__all__ = ["RMSNorm"]


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last axis (Zhang and Sennrich 2019, eq. 4; no mean is
    subtracted, no bias added).

    As Hugging Face's ``LlamaRMSNorm`` (and Qwen's, Mistral's), the statistics and the division are computed in
    ``compute_dtype`` (float32) whatever the input's dtype, the result cast back to it and then multiplied by the
    gain: a bfloat16 model normalises in float32, and a float64 model computes exactly what Hugging Face's does in
    float64 (with float32 statistics). Set ``compute_dtype = torch.float64`` for float64 statistics (gradient checks).

    ``unit_offset`` (Gemma's ``Gemma2RMSNorm``): ``(x / sqrt(mean(x^2) + eps)) * (1 + weight)``, the weight starting
    at zero, the product computed in ``compute_dtype`` too and only then cast back (as Gemma's does).

    ``wide_gain`` (OLMo 2's ``Olmo2RMSNorm``): ``(weight * normalised).to(x.dtype)``, the gain multiplied before the
    cast back (in float32 for a bfloat16 model; float64 weights keep float64), not after it.
    """

    def __init__(self, features: int, eps: float = 1e-6, *, unit_offset: bool = False, wide_gain: bool = False) -> None:
        super().__init__()
        self.features, self.eps, self.unit_offset = features, eps, unit_offset
        self.wide_gain = wide_gain
        self.weight = nn.Parameter(torch.zeros(features) if unit_offset else torch.ones(features))
        self.compute_dtype = torch.float32

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.features}"]) -> Float[Tensor, "*batch {self.features}"]:
        wide = x.to(self.compute_dtype)
        normalised = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.unit_offset:
            return (normalised * (1.0 + self.weight.to(self.compute_dtype))).to(x.dtype)
        if self.wide_gain:  # OLMo 2: the weight times the float32 statistics (type promotion), then the cast
            return (self.weight * normalised).to(x.dtype)
        return self.weight * normalised.to(x.dtype)

    def extra_repr(self) -> str:
        return (
            f"{self.features}, eps={self.eps}"
            + (", unit_offset=True" if self.unit_offset else "")
            + (", wide_gain=True" if self.wide_gain else "")
        )
