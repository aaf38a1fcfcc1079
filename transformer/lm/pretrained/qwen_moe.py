"""Qwen2-MoE (``Qwen2MoeForCausalLM``; Qwen Team 2024, "Qwen1.5-MoE") and Qwen3-MoE (``Qwen3MoeForCausalLM``; Qwen
Team 2025, "Qwen3 Technical Report", section 2) as :class:`LMConfig`: Qwen2's and Qwen3's attention with a mixture
of experts (:mod:`~transformer.lm.moe`) in the sparse layers.

* Which layers are sparse: layer ``i`` when ``i`` is not in ``mlp_only_layers`` and ``(i + 1) %
  decoder_sparse_step == 0`` (the others keep the dense SwiGLU of width ``intermediate_size``): LMConfig's
  ``dense_layers``.
* The block: ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``, the top ``num_experts_per_tok`` of
  a float32 softmax router, renormalised when ``norm_topk_prob`` (default false). Qwen2-MoE adds the shared expert
  (width ``shared_expert_intermediate_size``) scaled by ``sigmoid(shared_expert_gate x)``; Qwen3-MoE has none.
* Attention: Qwen2-MoE biases q, k, v when ``qkv_bias`` (default true), windows as Qwen2 (``layer_types``);
  Qwen3-MoE is Qwen3's (``attention_bias``, QK-norm, ``head_dim``) with ``sliding_window`` on every layer when
  ``use_sliding_window``.
* The files hold one tensor per expert (``mlp.experts.E.gate_proj``, ``up_proj``, ``down_proj``):
  :mod:`~transformer.lm.pretrained.expert_tensors`. transformers 5.24 writes Qwen3-MoE's expert count as
  ``num_local_experts`` (an attribute map of ``num_experts``): both are read.

Their routers round the top-k weights to the model's dtype before weighting the experts
(``router_top_value.to(router_logits.dtype)``; Mixtral's stay float32): LMConfig's ``router_weights_rounded``, set
for both. In float32 and float64 the same numbers; in bfloat16 and float16 the rounding of transformers 4.x and of
5.17 on (5.4's router rebinds ``router_logits`` to its float32 softmax first, so its cast does nothing and it
weights in float32: docs/moe.md, "Half precision").
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from ..moe.checks import sparse_layers
from .architectures import build_config
from .config_fields import ConfigFields
from .expert_tensors import EXPERT_NAMES, ExpertTensors
from .llama import Qwen2, Qwen3

__all__ = ["Qwen2Moe", "Qwen3Moe"]


class _QwenExperts(ExpertTensors):
    """The expert fields both Qwen mixtures read and write."""

    shared_expert: bool = True
    experts_field = "num_experts"

    def experts(self, config: ConfigFields, n_layers: int) -> dict[str, Any]:
        n_experts = config.integer(self.experts_field, 60, at_least=0)
        if self.experts_field == "num_local_experts" and not config.has("num_local_experts"):
            n_experts = config.integer("num_experts", 128, at_least=0)  # older files: the attribute's own name
        step = config.integer("decoder_sparse_step", 1)
        only = config.values.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and 0 <= i < n_layers for i in only):
            config.refuse("mlp_only_layers", only, f"expected layer indices in [0, {n_layers})")
        dense = tuple(i for i in range(n_layers) if i in only or n_experts == 0 or (i + 1) % step != 0)
        if len(dense) == n_layers:
            config.refuse("decoder_sparse_step", step, "it leaves no sparse layer (load it as a dense model)")
        shared = config.integer("shared_expert_intermediate_size", 5632) if self.shared_expert else None
        return dict(
            n_experts=n_experts,
            experts_per_token=config.integer("num_experts_per_tok", 4),
            expert_d_ff=config.integer("moe_intermediate_size", 1408),
            router_norm_topk=config.flag("norm_topk_prob", False),
            shared_expert_d_ff=shared,
            dense_layers=dense,
            router_aux_loss_coef=config.number("router_aux_loss_coef", 0.001, positive=False),
            router_weights_rounded=True,
        )

    def written_experts(self, config: LMConfig) -> dict[str, Any]:
        fields = {
            self.experts_field: config.n_experts,
            "num_experts_per_tok": config.experts_per_token,
            "moe_intermediate_size": config.expert_d_ff or config.d_ff,
            "norm_topk_prob": config.router_norm_topk,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [i for i in range(config.n_layers) if i not in sparse_layers(config)],
            "router_aux_loss_coef": config.router_aux_loss_coef,
        }
        if self.shared_expert:
            fields["shared_expert_intermediate_size"] = config.shared_expert_d_ff
        return fields


class Qwen2Moe(_QwenExperts, Qwen2):
    name = "Qwen2MoeForCausalLM"
    model_type = "qwen2_moe"
    needs = "as Qwen2 (qkv_bias), a softmax top-k mixture of experts with a gated shared expert, dense layers"
    names = EXPERT_NAMES + Qwen2.names

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        return {"qkv_bias": config.flag("qkv_bias", True), "out_bias": False, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {"qkv_bias": config.qkv_bias}

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        if not config.flag("use_sliding_window", False) and config.values.get("sliding_window") == 0:
            config = ConfigFields({**config.values, "sliding_window": None}, config.path)  # its default: no window
        return super().window(config, n_layers)

    def lm_config(self, config: ConfigFields) -> LMConfig:
        base = super().lm_config(config).to_dict()
        return build_config(config.path, **{**base, **self.experts(config, base["n_layers"])})

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {**super().config_json(config), **self.written_experts(config)}


class Qwen3Moe(_QwenExperts, Qwen3):
    name = "Qwen3MoeForCausalLM"
    model_type = "qwen3_moe"
    needs = "as Qwen3 (window on every layer or none), a softmax top-k mixture of experts, dense layers"
    names = EXPERT_NAMES[:2] + Qwen3.names
    shared_expert = False
    experts_field = "num_local_experts"

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        if not config.flag("use_sliding_window", False):
            return None
        return config.integer("sliding_window", 4096, optional=True)

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        return {"use_sliding_window": config.sliding_window is not None, "sliding_window": config.sliding_window}

    def lm_config(self, config: ConfigFields) -> LMConfig:
        base = super().lm_config(config).to_dict()
        return build_config(config.path, **{**base, **self.experts(config, base["n_layers"])})

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {**super().config_json(config), **self.written_experts(config)}
