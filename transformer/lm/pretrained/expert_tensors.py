"""A mixture of experts' tensors as checkpoint folders hold them: one tensor per expert and projection
(``experts.E.w1.weight`` in Mixtral's files, ``experts.E.gate_proj.weight`` in Qwen-MoE's and OLMoE's), where
transformers 5's model and ours stack them (``gate_up_proj`` (n_experts, 2 d_ff, d_model), gate above up, and
``down_proj`` (n_experts, d_model, d_ff)); transformers converts them when loading and back when saving
(``conversion_mapping.py``), and so do we: :meth:`ExpertTensors.expand_maps` turns the map of each stacked
parameter into one ``"part"`` :class:`~transformer.lm.pretrained.tensor_map.TensorMap` per expert and projection.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from .tensor_map import TensorMap

__all__ = ["ExpertTensors", "EXPERT_NAMES"]

#: our names of a mixture-of-experts block's tensors and transformers' model's (router, stacked experts, the
#: shared expert and its gate); :meth:`ExpertTensors.expand_maps` turns these into the files' names
EXPERT_NAMES = (
    (r"layers\.(\d+)\.feed_forward\.router\.weight", r"model.layers.\1.mlp.gate.weight"),
    (r"layers\.(\d+)\.feed_forward\.experts\.(gate_up_proj|down_proj)", r"model.layers.\1.mlp.experts.\2"),
    (r"layers\.(\d+)\.feed_forward\.shared\.ffn\.w_1\.weight", r"model.layers.\1.mlp.shared_expert.gate_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.shared\.ffn\.w_3\.weight", r"model.layers.\1.mlp.shared_expert.up_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.shared\.ffn\.w_2\.weight", r"model.layers.\1.mlp.shared_expert.down_proj.weight"),
    (r"layers\.(\d+)\.feed_forward\.shared\.gate\.weight", r"model.layers.\1.mlp.shared_expert_gate.weight"),
)


class ExpertTensors:
    """Mixed into an :class:`~transformer.lm.pretrained.architectures.Architecture` whose files hold one tensor per
    expert: ``expert_files`` names them, ``legacy_block`` is the block's name in the files."""

    #: our stacked parameter -> the files' per-expert projections it holds, in row order
    expert_files: ClassVar[dict[str, tuple[str, ...]]] = {
        "gate_up_proj": ("gate_proj", "up_proj"),
        "down_proj": ("down_proj",),
    }
    legacy_block: ClassVar[str] = "mlp"  #: Mixtral's files say ``block_sparse_moe`` (transformers renames it)

    def expand_maps(self, maps: list[TensorMap], shapes: dict[str, tuple[int, ...]]) -> list[TensorMap]:
        """``maps`` with each stacked expert parameter as one map per expert and projection (``experts.E.P.weight``
        is rows ``k d_ff .. (k + 1) d_ff`` of our ``[E]`` for the k-th projection P), and the block renamed
        ``legacy_block`` in every name of a sparse layer's tensors."""
        out = []
        for m in maps:
            stacked = m.ours[0].rsplit(".", 1)[-1]
            if ".feed_forward.router." not in m.ours[0] and ".feed_forward.experts." not in m.ours[0]:
                out.append(m)
            elif stacked not in self.expert_files:
                out.append(dataclasses.replace(m, theirs=m.theirs.replace(".mlp.", f".{self.legacy_block}.")))
            else:
                n_experts, rows = shapes[m.ours[0]][:2]
                names = self.expert_files[stacked]
                block = m.theirs.replace(f".mlp.experts.{stacked}", f".{self.legacy_block}.experts")
                step = rows // len(names)
                out += [
                    TensorMap(f"{block}.{e}.{name}.weight", m.ours, "part", part=(e, k * step, step))
                    for e in range(n_experts)
                    for k, name in enumerate(names)
                ]
        return out
