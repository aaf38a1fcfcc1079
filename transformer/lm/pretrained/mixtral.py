"""Mixtral (``MixtralForCausalLM``; Jiang et al. 2024, "Mixtral of Experts") as :class:`LMConfig`: Mistral's
attention (no biases, an optional ``sliding_window`` on every layer) with a mixture of experts in every layer
(:mod:`~transformer.lm.moe`): ``num_local_experts`` SwiGLU experts of width ``intermediate_size``, the top
``num_experts_per_tok`` of a softmax router per token, their weights renormalised to sum 1.

The tensors are transformers 5's: ``mlp.gate.weight`` (n_experts, d_model), ``mlp.experts.gate_up_proj``
(n_experts, 2 d_ff, d_model; gate above up) and ``mlp.experts.down_proj`` (n_experts, d_model, d_ff) in
transformers' model; the files (the Hub's, and what transformers' ``save_pretrained`` writes) hold
``block_sparse_moe.gate.weight`` and one ``block_sparse_moe.experts.E.w1`` (gate), ``w3`` (up), ``w2`` (down)
per expert (:mod:`~transformer.lm.pretrained.expert_tensors`). Fields:
``router_aux_loss_coef`` is kept for fine-tuning (the load-balancing loss's weight); ``output_router_logits`` is a
switch of their forward, not of the function, and not read; ``router_jitter_noise`` (multiplicative noise on the
router's input while training) is refused unless 0.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .expert_tensors import EXPERT_NAMES, ExpertTensors
from .llama import Mistral

__all__ = ["Mixtral"]


class Mixtral(ExpertTensors, Mistral):
    name = "MixtralForCausalLM"
    model_type = "mixtral"
    needs = "as Mistral (window default none), with a softmax top-k mixture of experts in every layer"
    names = EXPERT_NAMES[:2] + Mistral.names
    max_len_default = 4096 * 32

    expert_files = {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}
    legacy_block = "block_sparse_moe"

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        return config.integer("sliding_window", None, optional=True)

    def lm_config(self, config: ConfigFields) -> LMConfig:
        jitter = config.number("router_jitter_noise", 0.0, positive=False)
        if jitter != 0.0:
            config.refuse(
                "router_jitter_noise", jitter, "noise on the router's input while training is not implemented"
            )
        experts = dict(
            n_experts=config.integer("num_local_experts", 8),
            experts_per_token=config.integer("num_experts_per_tok", 2),
            router_aux_loss_coef=config.number("router_aux_loss_coef", 0.001, positive=False),
        )
        return build_config(config.path, **{**super().lm_config(config).to_dict(), **experts})

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **super().config_json(config),
            "num_local_experts": config.n_experts,
            "num_experts_per_tok": config.experts_per_token,
            "router_aux_loss_coef": config.router_aux_loss_coef,
            "router_jitter_noise": 0.0,
        }
