"""The checks of :class:`~transformer.lm.config.LMConfig`'s mixture-of-experts fields (docs/moe.md), called from its
``__post_init__``: each raises ValueError naming the field, its value and the field it depends on. With
``n_experts=None`` (a dense model) every other expert field must stay at its default, as it would be ignored."""

from __future__ import annotations

from typing import Any

from ...common.arguments import is_int, is_number

__all__ = ["check_experts", "EXPERT_DEFAULTS", "sparse_layers"]

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
    for name in ("router_norm_topk", "router_bias"):
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


def sparse_layers(config: Any) -> list[int]:
    """The layers whose feed-forward network is the mixture of experts (none when ``n_experts`` is None)."""
    if config.n_experts is None:
        return []
    return [i for i in range(config.n_layers) if i not in config.dense_layers]
