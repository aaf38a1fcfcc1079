"""gpt-oss's experts (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", section 2.1; transformers'
``GptOssExperts``): ``n_experts`` clamped SwiGLU networks with biases, their weights stacked as the checkpoint stores
them.

Expert ``e`` computes, with ``h = x W_e + b_e`` (2 d_ff wide, gate and up interleaved: ``g = h[..., 0::2]``,
``u = h[..., 1::2]``), the limit ``L`` and the gain ``alpha``::

    g = min(g, L);  u = clamp(u, -L, L);  y = ((u + 1) * g * sigmoid(alpha g)) D_e + d_e

``gate_up_proj`` (n_experts, d_model, 2 d_ff), ``gate_up_proj_bias`` (n_experts, 2 d_ff), ``down_proj``
(n_experts, d_ff, d_model) and ``down_proj_bias`` (n_experts, d_model) are the tensors ``mlp.experts.*`` of a
transformers gpt-oss checkpoint, element for element (used as ``x @ W``, not transposed). :meth:`forward` takes the
rows a :class:`~transformer.lm.moe.dispatch.Dispatch` laid out by expert, as
:class:`~transformer.lm.moe.experts.GatedExperts` does: each expert once on its block (a loop over the experts,
never over tokens); traced (compile, export), every expert on every row, each row keeping its own expert's output.
"""

from __future__ import annotations

import torch
from torch import nn

from ...contracts import Float, Int, Tensor, checked

__all__ = ["ClampedSwiGLUExperts"]


class ClampedSwiGLUExperts(nn.Module):
    """``n_experts`` clamped SwiGLU FFNs of width ``d_ff`` over ``d_model`` with biases (see the module)."""

    def __init__(self, n_experts: int, d_model: int, d_ff: int, *, limit: float = 7.0, alpha: float = 1.702) -> None:
        super().__init__()
        self.n_experts, self.d_model, self.d_ff = n_experts, d_model, d_ff
        self.limit, self.alpha = float(limit), float(alpha)
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, d_model, 2 * d_ff))
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(n_experts, 2 * d_ff))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d_ff, d_model))
        self.down_proj_bias = nn.Parameter(torch.zeros(n_experts, d_model))
        nn.init.normal_(self.gate_up_proj, std=0.02)
        nn.init.normal_(self.down_proj, std=0.02)

    def expert(self, x: Tensor, e: int) -> Tensor:
        """Expert ``e`` on the rows ``x`` (rows, d_model) -> (rows, d_model), transformers' order of operations."""
        h = x @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
        gate, up = h[..., 0::2].clamp(max=self.limit), h[..., 1::2].clamp(min=-self.limit, max=self.limit)
        return ((up + 1) * (gate * torch.sigmoid(gate * self.alpha))) @ self.down_proj[e] + self.down_proj_bias[e]

    @checked
    def forward(
        self, x: Float[Tensor, "pairs {self.d_model}"], counts: Int[Tensor, " n_experts"]
    ) -> Float[Tensor, "pairs {self.d_model}"]:
        """Rows sorted by expert, ``counts[e]`` rows for expert ``e`` (summing to ``pairs``): each block through its
        expert."""
        if torch.compiler.is_compiling():  # traced: no host read of the counts (as GatedExperts._traced)
            ends = torch.cumsum(counts, 0)
            expert = torch.searchsorted(ends, torch.arange(x.size(0), device=x.device), right=True)[:, None]
            out = x.new_zeros(x.size(0), self.d_model)
            for e in range(self.n_experts):
                out = torch.where(expert == e, self.expert(x, e), out)
            return out
        sizes = counts.tolist()
        if len(sizes) != self.n_experts or sum(sizes) != x.size(0) or min(sizes, default=0) < 0:
            raise ValueError(
                f"ClampedSwiGLUExperts: argument 'counts' must be {self.n_experts} non-negative counts summing to the "
                f"{x.size(0)} rows of 'x', got {sizes}"
            )
        outputs = [self.expert(block, e) for e, block in enumerate(torch.split(x, sizes)) if block.size(0)]
        return torch.cat(outputs) if outputs else x.new_zeros(0, self.d_model)
