"""Phi-3 (``Phi3ForCausalLM``; Abdin et al. 2024) as :class:`LMConfig`: the Llama family's model (RMSNorm, SwiGLU,
grouped-query attention, a bias-free head) with the query, key and value maps stored as one ``qkv_proj`` and the
gate and up maps as one ``gate_up_proj`` (ours one above the other: the ``"stacked"`` layout), rotary positions
on the first ``partial_rotary_factor`` of each head (``rope_fraction``), ``sliding_window`` on every layer.

As ``modeling_phi3.py`` reads its fields: the ``default`` RoPE rule only (``longrope``, and ``su``/``yarn`` which
Phi-3's config turns into ``longrope``, are refused); ``resid_pdrop`` drops the sub-layers' outputs but not the
embeddings (``embd_pdrop`` is read by no modelling code), so a non-zero ``resid_pdrop`` is refused (our ``dropout``
drops both); ``original_max_position_embeddings`` serves ``longrope`` only.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .config_fields import ConfigFields
from .llama import Llama
from .tensor_map import TensorMap

__all__ = ["Phi3"]


class Phi3(Llama):
    name = "Phi3ForCausalLM"
    model_type = "phi3"
    needs = "as Llama without biases, with partial rotary positions (rope_fraction) and the sliding window"
    max_len_default = 4096
    norm_eps_default = 1e-5
    rope_rules = ("default",)
    partial_rotary = True
    names = (
        (r"embed\.0\.lut\.weight", "model.embed_tokens.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.weight", r"model.layers.\1.input_layernorm.weight"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
        (r"layers\.(\d+)\.self_attn\.[qkv]_proj\.weight", r"model.layers.\1.self_attn.qkv_proj.weight"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.weight", r"model.layers.\1.self_attn.o_proj.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_[13]\.weight", r"model.layers.\1.mlp.gate_up_proj.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.weight", r"model.layers.\1.mlp.down_proj.weight"),
        (r"norm\.weight", "model.norm.weight"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )

    def lm_config(self, config: ConfigFields) -> LMConfig:
        if config.probability("resid_pdrop", 0.0) != 0.0:
            config.refuse(
                "resid_pdrop", config.values["resid_pdrop"], "Phi-3 drops no embeddings, and our dropout drops both"
            )
        return super().lm_config(config)

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        return {"qkv_bias": False, "out_bias": False, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {}

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        return config.integer("sliding_window", None, optional=True)

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        return {"sliding_window": config.sliding_window}

    def tensor_maps(self, our_names: list[str], config: LMConfig | None = None) -> list[TensorMap]:
        """As :meth:`Architecture.tensor_maps`, with q, k, v and the gate and up maps each one stacked tensor."""
        stacked: dict[str, list[str]] = {}
        maps: list[TensorMap] = []
        for name in our_names:
            theirs = self.their_name(name)
            if theirs.endswith(("qkv_proj.weight", "gate_up_proj.weight")):
                stacked.setdefault(theirs, []).append(name)
            else:
                maps.append(TensorMap(theirs, (name,)))
        return maps + [
            TensorMap(theirs, tuple(sorted(ours, key=_order)), "stacked") for theirs, ours in stacked.items()
        ]


def _order(name: str) -> int:
    """q, k, v; and the gate (w_1) above the up map (w_3)."""
    return {"q": 0, "k": 1, "v": 2, "w_1": 0, "w_3": 1}[name.split(".")[-2].removesuffix("_proj")]
