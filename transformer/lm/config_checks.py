"""The checks of :class:`~transformer.lm.config.LMConfig`'s block fields (docs/lm_blocks.md): rotary positions and
their scaling rules, head_dim, the bias switches, QK-norm, the gated feed-forward network, the sliding window.

Each check raises ValueError naming the field and its value (and the field it depends on). A field that only one
choice uses (``rope_factor`` with a scaling rule, ``rope_low_freq_factor`` with ``llama3``...) is refused at a
value other than its default when that choice is not made: it would be silently ignored otherwise.
"""

from __future__ import annotations

from typing import Any

from ..common.arguments import is_int, is_number

__all__ = ["check_blocks", "check_olmo", "ROPE_DEFAULTS"]

#: The rotary fields and their defaults (what a model without rotary positions must leave them at).
ROPE_DEFAULTS: dict[str, Any] = {
    "rope_theta": 10000.0,
    "rope_fraction": 1.0,
    "rope_scaling": "none",
    "rope_factor": 1.0,
    "rope_original_max_len": None,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_beta_fast": 32.0,
    "rope_beta_slow": 1.0,
    "rope_attention_factor": None,
}
#: Which scaling rules read each rule-specific field.
_USED_BY: dict[str, tuple[str, ...]] = {
    "rope_factor": ("linear", "llama3", "yarn"),
    "rope_original_max_len": ("llama3", "yarn"),
    "rope_low_freq_factor": ("llama3",),
    "rope_high_freq_factor": ("llama3",),
    "rope_beta_fast": ("yarn",),
    "rope_beta_slow": ("yarn",),
    "rope_attention_factor": ("yarn",),
}
_BOOLS = ("ffn_gated", "qkv_bias", "out_bias", "ffn_bias", "qk_norm", "lm_head_bias", "norm_unit_offset",
          "post_sublayer_norm", "embedding_scale_rounded", "parallel_residual")  # fmt: skip
_POSITIVE_FLOATS = ("rope_theta", "rope_factor", "rope_low_freq_factor", "rope_high_freq_factor", "rope_beta_fast",
                    "rope_beta_slow")  # fmt: skip


def _fail(message: str) -> None:
    raise ValueError(f"LMConfig: {message}")


def _check_types(config: Any) -> None:
    for name in _BOOLS:
        if not isinstance(getattr(config, name), bool):
            _fail(f"{name} must be a bool, got {name}={getattr(config, name)!r}")
    for name in _POSITIVE_FLOATS:
        value = getattr(config, name)
        if not is_number(value, finite=True) or value <= 0:
            _fail(f"{name} must be a positive float, got {name}={value!r}")
    value = config.rope_attention_factor
    if value is not None and (not is_number(value, finite=True) or value <= 0):
        _fail(f"rope_attention_factor must be a positive float or None, got rope_attention_factor={value!r}")
    fraction = config.rope_fraction
    if not is_number(fraction, finite=True) or not 0.0 < fraction <= 1.0:
        _fail(f"rope_fraction must be a float in (0, 1], got rope_fraction={fraction!r}")
    for name in ("head_dim", "sliding_window", "rope_original_max_len"):
        value = getattr(config, name)
        if value is not None and not is_int(value, at_least=1):
            _fail(f"{name} must be a positive int or None, got {name}={value!r}")


def _check_rotary(config: Any) -> None:
    if config.positional_encoding != "rotary":
        changed = [
            f"{name}={getattr(config, name)!r}" for name, d in ROPE_DEFAULTS.items() if getattr(config, name) != d
        ]
        if changed:
            _fail(
                f"{', '.join(changed)} only applies to rotary positions; set positional_encoding='rotary' "
                f"(got positional_encoding={config.positional_encoding!r}) or leave the rope_* fields at their defaults"
            )
        return
    for name, rules in _USED_BY.items():
        if config.rope_scaling not in rules and getattr(config, name) != ROPE_DEFAULTS[name]:
            _fail(
                f"{name}={getattr(config, name)!r} only applies to rope_scaling in {list(rules)}, got "
                f"rope_scaling={config.rope_scaling!r}"
            )
    if config.rope_scaling in ("llama3", "yarn") and config.rope_original_max_len is None:
        _fail(
            f"rope_scaling={config.rope_scaling!r} needs rope_original_max_len (the checkpoint's "
            "original_max_position_embeddings), got rope_original_max_len=None"
        )
    if config.rope_scaling == "llama3" and config.rope_high_freq_factor <= config.rope_low_freq_factor:
        _fail(
            f"rope_high_freq_factor={config.rope_high_freq_factor!r} must be above "
            f"rope_low_freq_factor={config.rope_low_freq_factor!r} (llama3 interpolates between them)"
        )
    rotated = config.rotary_dim
    if rotated <= 0 or rotated % 2 != 0:
        _fail(
            f"rope_fraction={config.rope_fraction!r} rotates int(d_k * rope_fraction) = {rotated} of each head's "
            f"d_k={config.d_k} dimensions; RoPE rotates pairs, so that must be even and > 0"
        )
    if config.positional_scale != 1.0:
        _fail(
            f"positional_scale={config.positional_scale!r} scales a table of positions, and "
            "positional_encoding='rotary' has none"
        )


def _check_gemma(config: Any) -> None:
    """The blocks of Gemma (docs/lm_blocks.md): per-layer windows and their RoPE base, the (1 + weight) RMSNorm,
    the soft caps."""
    for name in ("residual_scale", "logit_divisor"):
        value = getattr(config, name)
        if not is_number(value, finite=True) or value <= 0:
            _fail(f"{name} must be a positive float, got {name}={value!r}")
    if config.residual_scale != 1.0 and (config.parallel_residual or config.post_sublayer_norm):
        _fail(
            f"residual_scale={config.residual_scale!r} scales each sub-layer of the sequential layer: it needs "
            "parallel_residual=False and post_sublayer_norm=False"
        )
    if config.logit_divisor != 1.0 and config.logit_softcap is not None:
        _fail(f"logit_divisor={config.logit_divisor!r} with logit_softcap={config.logit_softcap!r}: one head transform")
    for name in ("attention_softcap", "logit_softcap", "rope_local_theta"):
        value = getattr(config, name)
        if value is not None and (not is_number(value, finite=True) or value <= 0):
            _fail(f"{name} must be a positive float or None, got {name}={value!r}")
    for name in ("window_layers", "rope_layers"):
        value = getattr(config, name)
        if value is not None and (
            not isinstance(value, tuple) or len(value) != config.n_layers or not all(isinstance(b, bool) for b in value)
        ):
            _fail(f"{name} must be None or {config.n_layers} bools (one per layer, n_layers), got {value!r}")
    if config.rope_layers is not None and config.positional_encoding != "rotary":
        _fail(
            f"rope_layers={config.rope_layers!r} says which layers rotate, and positional_encoding="
            f"{config.positional_encoding!r}; set positional_encoding='rotary'"
        )
    layers = config.window_layers
    if layers is not None:
        if config.sliding_window is None:
            _fail(f"window_layers={layers!r} says which layers the window applies to, and sliding_window is None")
    if config.rope_local_theta is not None:
        if config.positional_encoding != "rotary" or layers is None:
            _fail(
                f"rope_local_theta={config.rope_local_theta!r} is the RoPE base of the windowed layers: it needs "
                f"positional_encoding='rotary' (got {config.positional_encoding!r}) and window_layers (got {layers!r})"
            )
    if config.attention_softcap is not None and config.value_projection == "per_head":
        _fail(
            f"attention_softcap={config.attention_softcap!r} needs value_projection='output' (the per-head form's "
            "fused path has no score modifiers), got value_projection='per_head'"
        )
    if config.parallel_residual and (config.norm_placement != "pre" or config.post_sublayer_norm):
        _fail(
            "parallel_residual=True adds both sub-layers to the layer's input, each after its own norm: it needs "
            f"norm_placement='pre' and post_sublayer_norm=False, got norm_placement={config.norm_placement!r}, "
            f"post_sublayer_norm={config.post_sublayer_norm!r}"
        )
    if config.norm_unit_offset and config.norm != "rms":
        _fail(f"norm_unit_offset=True is RMSNorm's (1 + weight) gain, and norm={config.norm!r}; set norm='rms'")


def check_blocks(config: Any) -> None:
    """Raise ValueError naming the field when ``config``'s block fields describe no model (see the module)."""
    _check_types(config)
    _check_gemma(config)
    if config.positional_encoding == "none" and config.positional_scale != 1.0:
        _fail(f"positional_scale={config.positional_scale!r} scales positions, and positional_encoding='none' has none")
    _check_rotary(config)
    if config.value_projection == "per_head":
        given = [
            f"{name}={value!r}"
            for name, value, fine in (
                ("head_dim", config.head_dim, config.head_dim in (None, config.d_model // config.n_heads)),
                ("qkv_bias", config.qkv_bias, config.qkv_bias),
                ("out_bias", config.out_bias, config.out_bias),
            )
            if not fine
        ]
        if given:
            _fail(
                f"{', '.join(given)} needs value_projection='output' (the per-head form's values are the shared "
                "input in d_model / n_heads chunks, mapped by each head's own W_i and b_i; it has no W^V or W^O), "
                "got value_projection='per_head'"
            )


def check_olmo(config: Any) -> None:
    """The blocks of OLMo 2 and OLMoE (docs/lm_blocks.md, "OLMo's blocks"): the norm only after each sub-layer,
    QK-norm over the whole projection, the RMSNorm gain in float32."""
    for name in ("pre_sublayer_norm", "float32_gain_and_rotation"):
        if not isinstance(getattr(config, name), bool):
            _fail(f"{name} must be a bool, got {name}={getattr(config, name)!r}")
    if config.qk_norm_scope not in ("head", "projection"):
        _fail(f"qk_norm_scope must be 'head' or 'projection', got qk_norm_scope={config.qk_norm_scope!r}")
    if config.qk_norm_scope != "head" and not config.qk_norm:
        _fail(f"qk_norm_scope={config.qk_norm_scope!r} says what QK-norm normalises, and qk_norm=False")
    if not config.pre_sublayer_norm and (
        not config.post_sublayer_norm or config.norm_placement != "pre" or config.parallel_residual
    ):
        _fail(
            "pre_sublayer_norm=False leaves each sub-layer only the norm after it, x + Norm'(Sublayer(x)): it needs "
            f"post_sublayer_norm=True, norm_placement='pre' and parallel_residual=False, got post_sublayer_norm="
            f"{config.post_sublayer_norm!r}, norm_placement={config.norm_placement!r}, "
            f"parallel_residual={config.parallel_residual!r}"
        )
    if config.float32_gain_and_rotation and (config.norm != "rms" or config.norm_unit_offset):
        _fail(
            "float32_gain_and_rotation=True multiplies RMSNorm's gain before the cast back: it needs norm='rms' "
            f"and norm_unit_offset=False (which does so already), got norm={config.norm!r}, "
            f"norm_unit_offset={config.norm_unit_offset!r}"
        )
