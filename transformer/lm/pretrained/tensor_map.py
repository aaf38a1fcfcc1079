"""How one tensor of a Hugging Face checkpoint becomes parameters of :class:`TransformerLM`, and back.

A :class:`TensorMap` pairs a tensor name of the file (``theirs``) with one or more state_dict keys of ours and a
layout: ``"same"`` (the same tensor), ``"transposed"`` (GPT-2's ``Conv1D`` stores ``(in, out)``, ``nn.Linear``
``(out, in)``), ``"fused"`` (GPT-2's ``c_attn``: queries, keys and values side by side along the last dimension,
each transposed when 2-D), ``"stacked"`` (Phi-3's ``qkv_proj`` and ``gate_up_proj``: ours one above the other,
along the first dimension) and ``"batched"`` (GPT-2's ``wpe`` ``(positions, d_model)`` is our ``(1, max_len,
d_model)``). :meth:`TensorMap.to_theirs` lays our tensors out as theirs (views, but for a fused tensor): saving
writes it; on meta tensors it gives the shape their tensor must have, so every tensor is checked against the model
before a byte is read. :meth:`TensorMap.their_views` are views of our tensors in their layout, into which the
loader copies their tensor block by block, in the model's dtype and on its device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["TensorMap", "Layout"]

Layout = Literal["same", "transposed", "fused", "stacked", "batched"]


@dataclass(frozen=True)
class TensorMap:
    """Their tensor ``theirs`` is our parameters ``ours`` (several for ``"fused"``), laid out as ``layout``."""

    theirs: str
    ours: tuple[str, ...]
    layout: Layout = "same"

    def __post_init__(self) -> None:
        if (len(self.ours) > 1) != (self.layout in ("fused", "stacked")):
            raise ValueError(f"TensorMap {self.theirs}: layout {self.layout!r} with {len(self.ours)} of our tensors")

    def to_theirs(self, tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Their tensor from ours (a view, or a new tensor for ``"fused"``)."""
        if self.layout == "transposed":
            return tensors[0].t()
        if self.layout == "batched":
            return tensors[0].squeeze(0)
        if self.layout == "fused":
            return torch.cat([t.t() if t.dim() == 2 else t for t in tensors], dim=-1)
        if self.layout == "stacked":
            return torch.cat(tensors, dim=0)
        return tensors[0]

    def their_views(self, tensors: tuple[torch.Tensor, ...]) -> list[tuple[torch.Tensor, int, slice]]:
        """Views of our ``tensors`` laid out as theirs: ``(view, first row, columns)``, the view holding their rows
        ``first row, first row + 1, ...`` and, of those, the ``columns`` of their last dimension (a 1-d view holds
        their ``columns``). A loader fills ours by copying their tensor into the views, block by block of rows."""
        if self.layout == "fused":
            width = tensors[0].size(0)
            return [(t.t() if t.dim() == 2 else t, 0, slice(k * width, (k + 1) * width)) for k, t in enumerate(tensors)]
        if self.layout == "stacked":
            parts, first = [], 0
            for t in tensors:
                parts.append((t, first, slice(None)) if t.dim() > 1 else (t, 0, slice(first, first + t.size(0))))
                first += t.size(0)
            return parts
        return [(self.to_theirs(tensors), 0, slice(None))]

    def their_shape(self, our_shapes: tuple[torch.Size, ...]) -> tuple[int, ...]:
        """The shape their tensor must have for our parameters of ``our_shapes`` (computed on meta tensors)."""
        return tuple(self.to_theirs(tuple(torch.empty(s, device="meta") for s in our_shapes)).shape)
