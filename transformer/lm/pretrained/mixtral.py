"""Mixtral (``MixtralForCausalLM``; Jiang et al. 2024, "Mixtral of Experts") as :class:`LMConfig`: Mistral's
attention (no biases, an optional ``sliding_window`` on every layer) with a mixture of experts in every layer
(:mod:`~transformer.lm.moe`): ``num_local_experts`` SwiGLU experts of width ``intermediate_size``, the top
``num_experts_per_tok`` of a softmax router per token, their weights renormalised to sum 1.

The tensors are transformers 5's: ``mlp.gate.weight`` (n_experts, d_model), ``mlp.experts.gate_up_proj``
(n_experts, 2 d_ff, d_model; gate above up) and ``mlp.experts.down_proj`` (n_experts, d_model, d_ff). Fields:
``router_aux_loss_coef`` is kept for fine-tuning (the load-balancing loss's weight); ``output_router_logits`` is a
switch of their forward, not of the function, and not read; ``router_jitter_noise`` (multiplicative noise on the
router's input while training) is refused unless 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .llama import Mistral
from .tensor_map import TensorMap

__all__ = ["Mixtral", "EXPERT_NAMES"]

#: our names of a mixture-of-experts block's tensors and transformers' (router, stacked experts)
EXPERT_NAMES = (
    (r"layers\.(\d+)\.feed_forward\.router\.weight", r"model.layers.\1.mlp.gate.weight"),
    (r"layers\.(\d+)\.feed_forward\.experts\.(gate_up_proj|down_proj)", r"model.layers.\1.mlp.experts.\2"),
)


class Mixtral(Mistral):
    name = "MixtralForCausalLM"
    model_type = "mixtral"
    needs = "as Mistral (window default none), with a softmax top-k mixture of experts in every layer"
    names = EXPERT_NAMES + Mistral.names
    max_len_default = 4096 * 32

    #: their per-expert tensors of our stacked (gate above up, down): (our name, their names, rows of each)
    expert_files = {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}
    legacy_block = "block_sparse_moe"  #: the block's name in the files (transformers renames it ``mlp`` on load)

    def expand_maps(self, maps: list[TensorMap], shapes: dict[str, tuple[int, ...]]) -> list[TensorMap]:
        """Our stacked experts as the files hold them: ``block_sparse_moe.experts.E.w1.weight`` (the gate, rows
        0 .. d_ff of ``gate_up_proj[E]``), ``w3`` (up, the next d_ff rows) and ``w2`` (``down_proj[E]``), the router
        ``block_sparse_moe.gate.weight`` (as transformers 5's ``save_pretrained`` writes Mixtral, and the Hub's
        checkpoints are)."""
        out = []
        for m in maps:
            stacked = m.ours[0].rsplit(".", 1)[-1]
            if ".mlp." not in m.theirs:
                out.append(m)
            elif stacked not in self.expert_files:
                out.append(dataclasses.replace(m, theirs=m.theirs.replace(".mlp.", f".{self.legacy_block}.")))
            else:
                n_experts, rows = shapes[m.ours[0]][:2]
                names = self.expert_files[stacked]
                block = m.theirs.replace(f".mlp.experts.{stacked}", f".{self.legacy_block}.experts")
                step = rows // len(names)
                out += [
                    TensorMap(f"{block}.{e}.{name}.weight", m.ours, "part", (e, k * step, step))
                    for e in range(n_experts)
                    for k, name in enumerate(names)
                ]
        return out

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
