"""The checks of :class:`~transformer.lm.config.LMConfig`'s mixture-of-experts fields (docs/moe.md), called from its
``__post_init__``: each raises ValueError naming the field, its value and the field it depends on. With
``n_experts=None`` (a dense model) every other expert field must stay at its default, as it would be ignored."""

from __future__ import annotations

from typing import Any

from ...common.arguments import is_int, is_number

__all__ = ["check_experts", "check_gpt_oss", "EXPERT_DEFAULTS", "sparse_layers"]

#: The expert fields and their defaults (a dense model's values).
EXPERT_DEFAULTS: dict[str, Any] = {
    "experts_per_token": 2,
    "expert_d_ff": None,
    "router_score": "softmax",
    "router_norm_topk": True,
    "router_bias": False,
    "shared_expert_d_ff": None,
    "dense_layers": (),
    "router_aux_loss_coef": 0.0,
    "router_weights_rounded": False,
}


def _fail(message: str) -> None:
    raise ValueError(f"LMConfig: {message}")


def check_experts(config: Any) -> None:
    """Refuse impossible expert fields of ``config`` (an LMConfig); ``dense_layers`` given as a list (JSON) becomes a
    sorted tuple."""
    if isinstance(config.dense_layers, list):
        object.__setattr__(config, "dense_layers", tuple(config.dense_layers))
    if config.n_experts is None:
        for name, default in EXPERT_DEFAULTS.items():
            if getattr(config, name) != default:
                _fail(f"{name}={getattr(config, name)!r} needs n_experts (a mixture of experts); got n_experts=None")
        return
    if not is_int(config.n_experts, at_least=1):
        _fail(f"n_experts must be a positive int or None, got n_experts={config.n_experts!r}")
    if not is_int(config.experts_per_token, at_least=1) or config.experts_per_token > config.n_experts:
        _fail(
            f"experts_per_token must be an int in [1, n_experts={config.n_experts}], "
            f"got experts_per_token={config.experts_per_token!r}"
        )
    for name in ("expert_d_ff", "shared_expert_d_ff"):
        value = getattr(config, name)
        if value is not None and not is_int(value, at_least=1):
            _fail(f"{name} must be a positive int or None, got {name}={value!r}")
    if config.router_score not in ("softmax", "sigmoid"):
        _fail(f"router_score must be 'softmax' or 'sigmoid', got router_score={config.router_score!r}")
    for name in ("router_norm_topk", "router_bias", "router_weights_rounded"):
        if not isinstance(getattr(config, name), bool):
            _fail(f"{name} must be a bool, got {name}={getattr(config, name)!r}")
    layers = config.dense_layers
    if not isinstance(layers, tuple) or not all(is_int(i, at_least=0) and i < config.n_layers for i in layers):
        _fail(f"dense_layers must be layer indices in [0, n_layers={config.n_layers}), got dense_layers={layers!r}")
    if list(layers) != sorted(set(layers)):
        _fail(f"dense_layers must be increasing without repeats, got dense_layers={layers!r}")
    if len(layers) == config.n_layers:
        _fail(f"dense_layers={layers!r} makes every layer dense: use n_experts=None")
    value = config.router_aux_loss_coef
    if not is_number(value, finite=True) or value < 0:
        _fail(f"router_aux_loss_coef must be a float >= 0, got router_aux_loss_coef={value!r}")
    if not config.ffn_gated:
        _fail("n_experts (gated experts) needs ffn_gated=True (the dense layers' network is gated too)")


def check_gpt_oss(config: Any) -> None:
    """Refuse impossible gpt-oss fields (``attention_sinks``, ``expert_swiglu_limit``, ``expert_swiglu_alpha``,
    ``router_softmax_topk``, ``rope_yarn_truncate``; docs/moe.md, "gpt-oss"), naming the field, its value and what it
    needs."""
    if not isinstance(config.attention_sinks, bool):
        _fail(f"attention_sinks must be a bool, got attention_sinks={config.attention_sinks!r}")
    if config.attention_sinks and config.value_projection != "output":
        _fail(
            "attention_sinks=True needs value_projection='output' (the W^O form), got "
            f"value_projection={config.value_projection!r}"
        )
    limit, alpha = config.expert_swiglu_limit, config.expert_swiglu_alpha
    if limit is not None and (not is_number(limit, finite=True) or limit <= 0):
        _fail(f"expert_swiglu_limit must be a float > 0 or None, got expert_swiglu_limit={limit!r}")
    if not is_number(alpha, finite=True) or alpha <= 0:
        _fail(f"expert_swiglu_alpha must be a float > 0, got expert_swiglu_alpha={alpha!r}")
    if not isinstance(config.router_softmax_topk, bool):
        _fail(f"router_softmax_topk must be a bool, got router_softmax_topk={config.router_softmax_topk!r}")
    given = {"expert_swiglu_limit": limit is not None, "router_softmax_topk": config.router_softmax_topk}
    given["expert_swiglu_alpha"] = alpha != 1.702
    for name, changed in given.items():
        if changed and config.n_experts is None:
            _fail(f"{name}={getattr(config, name)!r} needs n_experts (a mixture of experts); got n_experts=None")
    if config.router_softmax_topk and (config.router_score != "softmax" or config.router_norm_topk):
        _fail(
            "router_softmax_topk=True (the softmax of the top-k logits) needs router_score='softmax' and "
            f"router_norm_topk=False (already summing to 1), got router_score={config.router_score!r}, "
            f"router_norm_topk={config.router_norm_topk!r}"
        )
    if not isinstance(config.rope_yarn_truncate, bool):
        _fail(f"rope_yarn_truncate must be a bool, got rope_yarn_truncate={config.rope_yarn_truncate!r}")
    if not config.rope_yarn_truncate and config.rope_scaling != "yarn":
        _fail(f"rope_yarn_truncate=False needs rope_scaling='yarn', got rope_scaling={config.rope_scaling!r}")
    if alpha != 1.702 and limit is None:
        _fail(f"expert_swiglu_alpha={alpha!r} needs expert_swiglu_limit (the clamped SwiGLU experts); got None")


def sparse_layers(config: Any) -> list[int]:
    """The layers whose feed-forward network is the mixture of experts (none when ``n_experts`` is None)."""
    if config.n_experts is None:
        return []
    return [i for i in range(config.n_layers) if i not in config.dense_layers]
