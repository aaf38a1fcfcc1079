"""The gated feed-forward network (Shazeer 2020, "GLU Variants Improve Transformer", equations 5-6): SwiGLU
(Llama, Mistral, Qwen) with SiLU, GeGLU with GELU."""

from __future__ import annotations

from torch import nn

from ..contracts import Float, Tensor, checked
from ..layers import ACTIVATIONS

__all__ = ["GatedFeedForward"]


class GatedFeedForward(nn.Module):
    """``FFN_GLU(x) = w_2(act(w_1 x) * w_3 x)`` (Shazeer 2020, eq. 6: ``(act(x W) * x V) W_2``).

    ``w_1`` is the gate (activated), ``w_3`` the up projection, ``w_2`` the down projection, as in Meta's Llama code
    (Hugging Face: ``gate_proj``, ``up_proj``, ``down_proj``). ``activation`` is a name of
    :data:`~transformer.layers.ACTIVATIONS` (``"silu"``: SwiGLU; ``"gelu"``/``"gelu_tanh"``: GeGLU); ``bias``
    switches the three maps' biases; dropout (when ``dropout`` > 0) acts on the gated hidden activations.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "silu", *, bias: bool = True):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    @checked
    def forward(self, x: Float[Tensor, "*batch {self.d_model}"]) -> Float[Tensor, "*batch {self.d_model}"]:
        return self.w_2(self.dropout(ACTIVATIONS[self.activation](self.w_1(x)) * self.w_3(x)))
