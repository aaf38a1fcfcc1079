"""The shared expert of Qwen2-MoE (Qwen Team 2024, "Qwen1.5-MoE"; DeepSeekMoE, Dai et al. 2024, section 3.2): a
gated FFN every token goes through, its output scaled by ``sigmoid(w_g x)``, added to the routed experts' sum.

``shared(x) = sigmoid(w_g . x) * down(act(gate x) * up x)``: transformers' ``mlp.shared_expert.{gate,up,down}_proj``
and ``mlp.shared_expert_gate`` (a (1, d_model) map without bias).
"""

from __future__ import annotations

import torch
from torch import nn

from ...contracts import Float, Tensor, checked
from ..gated_feed_forward import GatedFeedForward

__all__ = ["SharedExpert"]


class SharedExpert(nn.Module):
    """``sigmoid(gate(x)) * ffn(x)``: ``ffn`` a bias-free :class:`GatedFeedForward` of width ``d_ff``."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "silu") -> None:
        super().__init__()
        self.d_model = d_model
        self.ffn = GatedFeedForward(d_model, d_ff, 0.0, activation, bias=False)
        self.gate = nn.Linear(d_model, 1, bias=False)

    @checked
    def forward(self, x: Float[Tensor, "tokens {self.d_model}"]) -> Float[Tensor, "tokens {self.d_model}"]:
        return torch.sigmoid(self.gate(x)) * self.ffn(x)
