"""How one tensor of a Hugging Face checkpoint becomes parameters of :class:`TransformerLM`, and back.

A :class:`TensorMap` pairs a tensor name of the file (``theirs``) with one or more state_dict keys of ours and a
layout: ``"same"`` (the same tensor), ``"transposed"`` (GPT-2's ``Conv1D`` stores ``(in, out)``, ``nn.Linear``
``(out, in)``), ``"fused"`` (GPT-2's ``c_attn``: queries, keys and values side by side along the last dimension,
each transposed when 2-D), ``"stacked"`` (Phi-3's ``qkv_proj`` and ``gate_up_proj``: ours one above the other,
along the first dimension), ``"interleaved"`` (GPT-NeoX's ``query_key_value``: head by head, that head's query,
key and value rows, ``heads`` heads), ``"batched"`` (GPT-2's ``wpe`` ``(positions, d_model)`` is our ``(1,
max_len, d_model)``) and ``"part"`` (a mixture of experts' per-expert tensor, ``experts.E.w1.weight``, is rows
``first .. first + rows`` of expert ``E`` of our stacked parameter: ``part = (E, first, rows)``).
:meth:`TensorMap.to_theirs` lays our tensors out as theirs (views, but for a fused tensor): saving
writes it; :meth:`TensorMap.their_shape` gives, from the sizes alone, the shape their tensor must have, so every
tensor is checked against the model before a byte is read. :meth:`TensorMap.their_views` are views of our tensors
in their layout, into which the loader copies their tensor block by block of rows, in the model's dtype and on its
device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["TensorMap", "Layout"]

Layout = Literal["same", "transposed", "fused", "stacked", "batched", "interleaved", "part"]


@dataclass(frozen=True)
class TensorMap:
    """Their tensor ``theirs`` is our parameters ``ours`` (several for ``"fused"``), laid out as ``layout``."""

    theirs: str
    ours: tuple[str, ...]
    layout: Layout = "same"
    heads: int = 1  #: ``"interleaved"``: the heads each of ours is split into
    part: tuple[int, int, int] | None = None  #: ``"part"``: (expert, first row, rows) of our stacked parameter

    def __post_init__(self) -> None:
        if (len(self.ours) > 1) != (self.layout in ("fused", "stacked", "interleaved")):
            raise ValueError(f"TensorMap {self.theirs}: layout {self.layout!r} with {len(self.ours)} of our tensors")
        if (self.part is not None) != (self.layout == "part"):
            raise ValueError(f"TensorMap {self.theirs}: layout {self.layout!r} with part={self.part!r}")

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
        if self.layout == "interleaved":  # head h's rows of each of ours, one after the other, head after head
            split = [t.reshape(self.heads, t.size(0) // self.heads, *t.shape[1:]) for t in tensors]
            return torch.stack(split, dim=1).reshape(-1, *tensors[0].shape[1:])
        if self.layout == "part":
            expert, first, rows = self.part
            return tensors[0][expert, first : first + rows]
        return tensors[0]

    def their_views(self, tensors: tuple[torch.Tensor, ...]) -> list[tuple[torch.Tensor, int, slice]]:
        """Views of our ``tensors`` laid out as theirs: ``(view, first row, columns)``, the view holding their rows
        ``first row, first row + 1, ...`` and, of those, the ``columns`` of their last dimension (a 1-d view holds
        their ``columns``). A loader fills ours by copying their tensor into the views, block by block of rows."""
        if self.layout == "fused":
            width = tensors[0].size(0)
            return [(t.t() if t.dim() == 2 else t, 0, slice(k * width, (k + 1) * width)) for k, t in enumerate(tensors)]
        if self.layout == "interleaved":
            parts, first = [], 0
            for h in range(self.heads):
                for t in tensors:
                    rows = t.size(0) // self.heads
                    piece = t[h * rows : (h + 1) * rows]
                    parts.append((piece, first, slice(None)) if t.dim() > 1 else (piece, 0, slice(first, first + rows)))
                    first += rows
            return parts
        if self.layout == "stacked":
            parts, first = [], 0
            for t in tensors:
                parts.append((t, first, slice(None)) if t.dim() > 1 else (t, 0, slice(first, first + t.size(0))))
                first += t.size(0)
            return parts
        return [(self.to_theirs(tensors), 0, slice(None))]

    def their_shape(self, our_shapes: tuple[torch.Size, ...]) -> tuple[int, ...]:
        """The shape their tensor must have for our parameters of ``our_shapes``, as :meth:`to_theirs` lays them out.

        Computed from the sizes alone: ``torch.cat`` on meta tensors runs a Python meta kernel that imports
        ``torch._dynamo`` (0.8 s and 150 MiB, torch 2.13) on the first GPT-2 load."""
        shapes = [tuple(shape) for shape in our_shapes]
        if self.layout == "transposed":
            if len(shapes[0]) > 2:
                raise ValueError(f"TensorMap {self.theirs}: a transposed tensor has at most 2 dimensions, got {shapes}")
            return shapes[0][::-1]
        if self.layout == "batched":
            return shapes[0][1:] if shapes[0][:1] == (1,) else shapes[0]
        if self.layout == "fused":
            laid = [shape[::-1] if len(shape) == 2 else shape for shape in shapes]
            return self._joined(laid, axis=-1)
        if self.layout in ("stacked", "interleaved"):
            if self.layout == "interleaved" and any(shape[0] % self.heads for shape in shapes):
                raise ValueError(f"TensorMap {self.theirs}: {shapes} do not split into {self.heads} heads")
            return self._joined(shapes, axis=0)
        if self.layout == "part":
            expert, first, rows = self.part
            if len(shapes[0]) < 2 or not 0 <= expert < shapes[0][0] or first + rows > shapes[0][1]:
                raise ValueError(f"TensorMap {self.theirs}: part {self.part} outside our tensor of shape {shapes[0]}")
            return (rows, *shapes[0][2:])
        return shapes[0]

    def _joined(self, shapes: list[tuple[int, ...]], axis: int) -> tuple[int, ...]:
        """The shape of ``shapes`` concatenated along ``axis`` (each shape's other sizes must be the first's)."""
        rest = {shape[1:] if axis == 0 else shape[:-1] for shape in shapes}
        if any(not shape or len(shape) != len(shapes[0]) for shape in shapes) or len(rest) > 1:
            raise ValueError(
                f"TensorMap {self.theirs}: our tensors {', '.join(self.ours)} of shapes {shapes} cannot be joined "
                f"along dimension {axis}"
            )
        total = sum(shape[axis] for shape in shapes)
        return (total, *shapes[0][1:]) if axis == 0 else (*shapes[0][:-1], total)
