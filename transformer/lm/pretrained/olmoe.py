"""OLMoE (``OlmoeForCausalLM``; Muennighoff et al. 2024, "OLMoE: Open Mixture-of-Experts Language Models") as
:class:`LMConfig`: the Llama family's pre-norm layer (rotary positions, RMSNorm before each sub-layer, grouped-query
attention) with QK-norm over the whole projection and a mixture of experts in every layer
(:mod:`~transformer.lm.moe`), as ``modeling_olmoe.py`` computes them:

* QK-norm: ``q_norm`` (``hidden_size`` wide) on ``q_proj(x)`` and ``k_norm`` (``hidden_size / num_attention_heads
  * num_key_value_heads``) on ``k_proj(x)``, before the heads are split (``qk_norm_scope="projection"``); its
  widths are d_model's, so a ``head_dim`` other than ``hidden_size / num_attention_heads`` (which transformers'
  modelling code would fail on) is refused;
* the block: ``num_experts`` (transformers' attribute map also says ``num_local_experts``: both read; 64 when
  absent) SwiGLU experts of width ``intermediate_size``, the top ``num_experts_per_tok`` (8) of a float32 softmax
  router, renormalised when ``norm_topk_prob`` (false), no shared expert, no dense layer;
* the load-balancing loss (Switch Transformer's, :mod:`~transformer.lm.moe.aux_loss`, as transformers'
  ``load_balancing_loss_func``) weighted by ``router_aux_loss_coef`` (0.01) when fine-tuning.

The files hold one tensor per expert (``mlp.experts.E.gate_proj``, ``up_proj``, ``down_proj``, as Qwen-MoE's:
:mod:`~transformer.lm.pretrained.expert_tensors`). Refused by name: ``clip_qkv`` other than null (the queries, keys
and values clamped: not implemented), a ``sliding_window`` other than null (only transformers' flash attention
would apply it; its mask does not). ``output_router_logits`` switches their forward's outputs, not the function,
and is not read. Like Qwen-MoE's, the router rounds the top-k weights to the model's dtype before weighting the
experts (``router_weights_rounded``, set here): in float32 and float64 the same numbers, in bfloat16 transformers'
rounding (5.17 and later; 5.4 weights in float32: docs/moe.md, "Half precision").
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .expert_tensors import EXPERT_NAMES, ExpertTensors
from .llama import Llama

__all__ = ["Olmoe"]


class Olmoe(ExpertTensors, Llama):
    name = "OlmoeForCausalLM"
    model_type = "olmoe"
    needs = (
        "as Llama (attention_bias, no mlp_bias), with QK-norm over the whole projection "
        "(qk_norm_scope='projection') and a softmax top-k mixture of experts in every layer"
    )
    names = EXPERT_NAMES[:2] + Llama.names
    norm_eps_default = 1e-5
    max_len_default = 4096

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        attention = config.flag("attention_bias", False)
        return {"qkv_bias": attention, "out_bias": attention, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {"attention_bias": config.qkv_bias}

    def lm_config(self, config: ConfigFields) -> LMConfig:
        clip = config.number("clip_qkv", None, optional=True)
        if clip is not None:
            config.refuse("clip_qkv", clip, "clamping the queries, keys and values is not implemented (only null)")
        window = config.values.get("sliding_window")
        if window is not None:
            config.refuse(
                "sliding_window", window, "OLMoE's mask has no window (only transformers' flash attention applies one)"
            )
        fields = super().lm_config(config).to_dict()
        d_k = fields["d_model"] // fields["n_heads"]
        if fields["head_dim"] not in (None, d_k) or fields["d_model"] % fields["n_heads"]:
            config.refuse(
                "head_dim",
                config.values.get("head_dim"),
                f"OLMoE's q_norm and k_norm are hidden_size / num_attention_heads = {d_k} per head wide; only that "
                "head width is implemented",
            )
        n_experts = config.integer("num_experts", 64)
        if config.has("num_local_experts"):
            n_experts = config.integer("num_local_experts")
        experts = dict(
            qk_norm=True,
            qk_norm_scope="projection",
            n_experts=n_experts,
            experts_per_token=config.integer("num_experts_per_tok", 8),
            router_norm_topk=config.flag("norm_topk_prob", False),
            router_aux_loss_coef=config.number("router_aux_loss_coef", 0.01, positive=False),
            router_weights_rounded=True,
        )
        return build_config(config.path, **{**fields, **experts})

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        fields = super().config_json(config)
        del fields["head_dim"]  # not an OlmoeConfig field: d_model / n_heads, as read
        return {
            **fields,
            "num_experts": config.n_experts,
            "num_experts_per_tok": config.experts_per_token,
            "norm_topk_prob": config.router_norm_topk,
            "router_aux_loss_coef": config.router_aux_loss_coef,
            "clip_qkv": None,
        }
