"""Tiny mixture-of-experts models of transformers (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE) for the checkpoint tests:
built from its config classes with random weights (never downloaded); every weight drawn wide (std 0.3, 1-D ones
around their initial value) so that routing differs from token to token and an expert read into the wrong place
changes the logits. Float64 models run transformers' eager experts (its default ``grouped_mm`` refuses float64)."""

from __future__ import annotations

import copy

import torch
from pretrained_helpers import VOCAB

COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0}, num_experts_per_tok=2,
)  # fmt: skip

CONFIGS = {  # fmt: skip
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(num_local_experts=5)),
    # layer 1 of 3 dense (mlp_only_layers), experts narrower than the dense network, a shared expert
    "qwen2_moe": (
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        dict(
            num_experts=5,
            num_hidden_layers=3,
            mlp_only_layers=[1],
            moe_intermediate_size=12,
            shared_expert_intermediate_size=20,
            norm_topk_prob=False,
        ),
    ),
    # every second layer sparse (decoder_sparse_step 2: layers 1 and 3), QK-norm, head_dim 12, renormalised top-k
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(
            num_experts=5,
            num_hidden_layers=4,
            decoder_sparse_step=2,
            moe_intermediate_size=12,
            head_dim=12,
            norm_topk_prob=True,
        ),
    ),
}


def moe_config(transformers, kind: str, **overrides):
    config_class, _, fields = CONFIGS[kind]
    return getattr(transformers, config_class)(**{**COMMON, **fields, **overrides})


def moe_model(transformers, kind: str, dtype=torch.float32, seed: int = 0, **overrides):
    """A random tiny model of ``kind`` in eval mode, in ``dtype``."""
    config = moe_config(transformers, kind, **overrides)
    torch.manual_seed(seed)
    model_class = getattr(transformers, CONFIGS[kind][1])
    model = model_class._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if p.dim() == 1 and "norm" in name else 0.0, 0.3)
    if dtype == torch.float64:
        model.config._experts_implementation = "eager"
    return model.eval().to(dtype)


def skip_if_their_aux_loss_is_softmax_twice(transformers, model) -> None:
    """Skip where transformers' router returns its softmax as ``router_logits`` (5.4 does; 5.17 and 5.24 return the
    logits): its ``aux_loss`` then applies the softmax twice, not the load-balancing loss its docstring defines."""
    import pytest

    hidden = torch.randn(3, model.config.hidden_size, dtype=model.dtype)
    first, *_ = model.model.layers[-1].mlp.gate(hidden)
    if torch.allclose(first.sum(-1), torch.ones(3, dtype=first.dtype)):
        pytest.skip(
            f"transformers {transformers.__version__}'s router returns its softmax as router_logits, so its aux_loss "
            "applies the softmax twice (later versions, 5.17 and 5.24 here, return the logits)"
        )


def their_router_rounds(module: str) -> bool:
    """Whether the installed transformers' router of ``module`` (``qwen2_moe``, ``qwen3_moe``, ``olmoe``) rounds its
    top-k weights to the model's dtype (4.x did, 5.17 and 5.24 do: our ``router_weights_rounded``); 5.4 weights in
    float32 (docs/moe.md, "Half precision")."""
    import importlib
    import inspect

    source = inspect.getsource(importlib.import_module(f"transformers.models.{module}.modeling_{module}"))
    # 5.4 writes the same cast, but after ``router_logits`` was rebound to the float32 softmax: no cast there
    rebound = "router_logits = torch.nn.functional.softmax(router_logits, dtype=torch.float" in source
    return "router_top_value.to(router_logits.dtype)" in source and not rebound
