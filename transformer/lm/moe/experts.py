"""The experts of a mixture of experts: ``n_experts`` gated feed-forward networks (Shazeer 2020's SwiGLU, as in
Mixtral, Qwen-MoE and OLMoE) with their weights stacked, as transformers 5 stores them.

Expert ``e`` computes ``down_e(act(gate_e x) * up_e x)``. ``gate_up_proj`` (n_experts, 2 d_ff, d_model) holds
``gate_e`` (its first d_ff rows) above ``up_e`` (the next d_ff), ``down_proj`` (n_experts, d_model, d_ff): the
tensors ``mlp.experts.gate_up_proj`` and ``mlp.experts.down_proj`` of a transformers 5 checkpoint, row for row.
:meth:`GatedExperts.forward` takes the rows a :class:`~transformer.lm.moe.dispatch.Dispatch` laid out by expert
and runs each expert once on its block of rows, never a loop over tokens: with ``torch.nn.functional.grouped_mm``
(torch 2.10 and later) one grouped matmul per projection for all the experts, where it applies (float32, bfloat16,
float16, rows of a multiple of 16 bytes, as transformers' ``grouped_mm`` path); otherwise (float64, torch 2.9) a
loop over the experts, one pair of matmuls each. Both compute each row with its expert's weights alone
(tests/test_moe.py checks both against a loop over tokens).
"""

from __future__ import annotations

import torch
from torch import nn

from ...contracts import Float, Int, Tensor, checked
from ...layers import ACTIVATIONS

__all__ = ["GatedExperts"]


class GatedExperts(nn.Module):
    """``n_experts`` gated FFNs of width ``d_ff`` over ``d_model``, weights stacked (see the module)."""

    def __init__(self, n_experts: int, d_model: int, d_ff: int, activation: str = "silu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"GatedExperts: activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.n_experts, self.d_model, self.d_ff, self.activation = n_experts, d_model, d_ff, activation
        self.gate_up_proj = nn.Parameter(torch.empty(n_experts, 2 * d_ff, d_model))
        self.down_proj = nn.Parameter(torch.empty(n_experts, d_model, d_ff))
        nn.init.normal_(self.gate_up_proj, std=0.02)
        nn.init.normal_(self.down_proj, std=0.02)

    @checked
    def forward(
        self, x: Float[Tensor, "pairs {self.d_model}"], counts: Int[Tensor, " n_experts"]
    ) -> Float[Tensor, "pairs {self.d_model}"]:
        """Rows sorted by expert, ``counts[e]`` rows for expert ``e`` (summing to ``pairs``): each block through its
        expert."""
        act = ACTIVATIONS[self.activation]
        if torch.compiler.is_compiling():  # traced (compile, export, prove): no host read of the counts
            return self._traced(x, counts, act)
        sizes = counts.tolist()  # one host read: the block boundaries
        if len(sizes) != self.n_experts or sum(sizes) != x.size(0) or min(sizes, default=0) < 0:
            raise ValueError(
                f"GatedExperts: argument 'counts' must be {self.n_experts} non-negative counts summing to the "
                f"{x.size(0)} rows of 'x', "
                f"got {sizes}"
            )
        if self._grouped(x):
            offsets = torch.cumsum(counts, 0, dtype=torch.int32)
            gate, up = _GROUPED_MM(x, self.gate_up_proj.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
            return _GROUPED_MM((act(gate) * up).contiguous(), self.down_proj.transpose(-2, -1), offs=offsets)
        outputs = []
        for e, block in enumerate(torch.split(x, sizes)):
            if block.size(0) == 0:
                continue
            gate, up = nn.functional.linear(block, self.gate_up_proj[e]).chunk(2, dim=-1)
            outputs.append(nn.functional.linear(act(gate) * up, self.down_proj[e]))
        return torch.cat(outputs) if outputs else x.new_zeros(0, self.d_model)

    def _traced(self, x: Tensor, counts: Tensor, act) -> Tensor:
        """The same function without reading ``counts`` on the host, for a traced graph (torch.compile, export,
        prove): every expert runs on every row and each row keeps its own expert's output (the expert of row r is
        the number of block ends at or below r), so the graph has no size that depends on the routing. Each row's
        value is exactly the eager one; the cost is n_experts / k times the experts' matmuls."""
        ends = torch.cumsum(counts, 0)
        expert = torch.searchsorted(ends, torch.arange(x.size(0), device=x.device), right=True)[:, None]
        out = x.new_zeros(x.size(0), self.d_model)
        for e in range(self.n_experts):
            gate, up = nn.functional.linear(x, self.gate_up_proj[e]).chunk(2, dim=-1)
            out = torch.where(expert == e, nn.functional.linear(act(gate) * up, self.down_proj[e]), out)
        return out

    def _grouped(self, x: Tensor) -> bool:
        """Whether ``grouped_mm`` takes these rows: it exists, the dtype is one it multiplies, every row's stride
        a multiple of 16 bytes (its requirement), and the weights have x's dtype and device."""
        size = x.element_size()
        return (
            _GROUPED_MM is not None
            and x.dtype in (torch.float32, torch.bfloat16, torch.float16)
            and (self.d_model * size) % 16 == 0
            and (self.d_ff * size) % 16 == 0
            and self.gate_up_proj.dtype == x.dtype
            and x.is_contiguous()
            and x.size(0) > 0
        )


#: torch.nn.functional.grouped_mm (torch 2.10 and later), or None
_GROUPED_MM = getattr(nn.functional, "grouped_mm", None)
