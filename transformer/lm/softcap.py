"""Final-logit soft-capping (Team Gemma 2024, "Gemma 2", section 2.2 "Logit soft-capping"): the output logits
``z`` become ``c * tanh(z / c)``, every logit within (-c, c) and nearly unchanged where ``|z|`` is well below ``c``.

The cap lives in the output projection itself (:class:`SoftCappedLinear`, the ``proj`` of the model's
:class:`~transformer.model.Generator`), so whatever reads the logits (``TransformerLM.logits``, the log-softmax of
training, decoding's ``decision_log_probs``) reads them capped. The attention scores' cap (Gemma 2's
``attn_logit_softcapping``) is the attention's score modifier ``softcap`` (:mod:`transformer.backends.score_mods`).
Granite's ``logits_scaling`` s, the logits divided by s, is the same kind of map on the head's outputs
(:class:`DividedLinear`).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..contracts import Float, Tensor, checked

__all__ = ["SoftCappedLinear", "DividedLinear"]


class SoftCappedLinear(nn.Linear):
    """``c * tanh((x W^T + b) / c)``: a linear map whose outputs are soft-capped at ``cap`` = c (> 0), computed as
    transformers' Gemma computes it (divide, tanh, multiply)."""

    def __init__(self, in_features: int, out_features: int, cap: float, *, bias: bool = True) -> None:
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not math.isfinite(cap) or cap <= 0:
            raise ValueError(f"SoftCappedLinear: argument 'cap' must be a finite number > 0, got {cap!r}")
        super().__init__(in_features, out_features, bias=bias)
        self.cap = float(cap)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.in_features}"]) -> Float[Tensor, "*batch {self.out_features}"]:
        return torch.tanh(super().forward(x) / self.cap) * self.cap

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, cap={self.cap}"


class DividedLinear(nn.Linear):
    """``(x W^T + b) / s``: a linear map whose outputs are divided by ``divisor`` = s (> 0; Granite's
    ``logits_scaling``, computed as transformers' Granite computes it)."""

    def __init__(self, in_features: int, out_features: int, divisor: float, *, bias: bool = True) -> None:
        if (
            isinstance(divisor, bool)
            or not isinstance(divisor, (int, float))
            or not math.isfinite(divisor)
            or divisor <= 0
        ):
            raise ValueError(f"DividedLinear: argument 'divisor' must be a finite number > 0, got {divisor!r}")
        super().__init__(in_features, out_features, bias=bias)
        self.divisor = float(divisor)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.in_features}"]) -> Float[Tensor, "*batch {self.out_features}"]:
        return super().forward(x) / self.divisor

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, divisor={self.divisor}"
