"""The rotary position embedding of a ``config.json`` (RoFormer, Su et al. 2021) as :class:`LMConfig`'s ``rope_*``
fields, and back.

transformers 5 writes ``rope_parameters`` (``rope_type``, ``rope_theta`` and the scaling rule's numbers); older
files have ``rope_scaling`` (with ``type`` or ``rope_type``) and a top-level ``rope_theta``. Both are read, with the
defaults and precedences of transformers' ``RotaryEmbeddingConfigMixin`` (``modeling_rope_utils.py``):

* ``default``: the theta only; ``linear``: ``factor`` (positions divided by it);
* ``llama3``: ``factor``, ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``;
* ``yarn``: ``factor`` (absent: max_position_embeddings / original), ``beta_fast`` and ``beta_slow`` (32 and 1 when
  absent or 0), the cos/sin factor ``attention_factor`` (absent: from ``mscale`` and ``mscale_all_dim`` when both are
  given, else 0.1 ln(factor) + 1 for factor > 1 and 1 otherwise), ``truncate`` (default true; false, gpt-oss's files,
  is LMConfig's ``rope_yarn_truncate=False``, written back only then).

``original_max_position_embeddings`` at the top level of the file wins over the one inside (as transformers reads
Phi-3's files); absent, it is ``max_position_embeddings``. Every other rule (``dynamic``, ``longrope``, ...), any
key that is not one of the rule's and a ``partial_rotary_factor`` other than 1 where the architecture rotates whole
heads (the Llama family's modelling code ignores it for the default rule and fails on it for the others; Phi-3
reads it) are refused naming the field.
"""

from __future__ import annotations

import math
from typing import Any

from ..config import LMConfig
from .config_fields import ConfigFields

__all__ = ["rope_fields", "rope_parameters", "yarn_attention_factor"]

_COMMON = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
_KEYS = {
    "default": _COMMON,
    "linear": _COMMON | {"factor"},
    "llama3": _COMMON | {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "yarn": _COMMON
    | {
        "factor",
        "attention_factor",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
        "truncate",
        "original_max_position_embeddings",
    },
}
_SCALING = {"default": "none", "linear": "linear", "llama3": "llama3", "yarn": "yarn"}


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_fields(config: ConfigFields, rules: tuple[str, ...] = tuple(_KEYS), partial: bool = False) -> dict[str, Any]:
    """The ``rope_*`` fields of :class:`LMConfig` (and ``positional_encoding="rotary"``) for ``config``, whose
    architecture implements the RoPE rules ``rules`` and, when ``partial``, ``partial_rotary_factor``
    (``rope_fraction``)."""
    nested = config.values.get("rope_parameters") or config.values.get("rope_scaling") or {}
    name = "rope_parameters" if config.values.get("rope_parameters") else "rope_scaling"
    if not isinstance(nested, dict):
        config.refuse(name, nested, "expected a JSON object of RoPE parameters")
    rope = ConfigFields(nested, config.path, prefix=f"{name}.")
    kind = nested.get("rope_type", nested.get("type", "default"))
    if kind not in rules:
        rope.refuse("rope_type", kind, f"the supported RoPE rules of this architecture are {sorted(rules)}")
    rope.only(_KEYS[kind])
    theta = rope.number("rope_theta", config.number("rope_theta", 10000.0))
    fraction = rope.number("partial_rotary_factor", config.number("partial_rotary_factor", 1.0))
    if fraction != 1.0 and not partial:
        where = rope if rope.has("partial_rotary_factor") else config
        where.refuse("partial_rotary_factor", fraction, "this architecture's modelling code rotates whole heads")
    fields: dict[str, Any] = {"positional_encoding": "rotary", "rope_theta": theta, "rope_scaling": _SCALING[kind]}
    if partial:
        fields["rope_fraction"] = fraction
    if kind == "default":
        return fields
    if kind in ("llama3", "yarn"):
        original = config.integer(
            "original_max_position_embeddings",
            rope.integer("original_max_position_embeddings", config.integer("max_position_embeddings")),
        )
        fields["rope_original_max_len"] = original
    if kind == "linear":
        fields["rope_factor"] = rope.number("factor")
    elif kind == "llama3":
        fields["rope_factor"] = rope.number("factor")
        fields["rope_low_freq_factor"] = rope.number("low_freq_factor")
        fields["rope_high_freq_factor"] = rope.number("high_freq_factor")
    else:
        factor = rope.number("factor", None, optional=True)
        if factor is None:
            factor = config.integer("max_position_embeddings") / fields["rope_original_max_len"]
        attention = rope.number("attention_factor", None, optional=True)
        mscale = rope.number("mscale", None, optional=True, positive=False)
        mscale_all_dim = rope.number("mscale_all_dim", None, optional=True, positive=False)
        if attention is None:
            attention = (
                _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
                if mscale and mscale_all_dim
                else _yarn_mscale(factor)
            )
        truncate = rope.flag("truncate", True)
        if not truncate:
            fields["rope_yarn_truncate"] = False
        fields["rope_factor"] = factor
        fields["rope_attention_factor"] = float(attention)
        fields["rope_beta_fast"] = rope.number("beta_fast", None, optional=True, positive=False) or 32.0
        fields["rope_beta_slow"] = rope.number("beta_slow", None, optional=True, positive=False) or 1.0
    return fields


def rope_parameters(config: LMConfig) -> dict[str, Any]:
    """The ``rope_parameters`` object of a ``config.json`` for ``config`` (rotary positions), as transformers 5
    writes it; yarn's cos/sin factor is written out, so a reader need not recompute it."""
    kind = {value: key for key, value in _SCALING.items()}[config.rope_scaling]
    out: dict[str, Any] = {"rope_type": kind, "rope_theta": config.rope_theta}
    if config.rope_fraction != 1.0:
        out["partial_rotary_factor"] = config.rope_fraction
    if kind != "default":
        out["factor"] = config.rope_factor
    if kind in ("llama3", "yarn"):
        out["original_max_position_embeddings"] = config.rope_original_max_len
    if kind == "llama3":
        out["low_freq_factor"] = config.rope_low_freq_factor
        out["high_freq_factor"] = config.rope_high_freq_factor
    if kind == "yarn":
        out["beta_fast"] = config.rope_beta_fast
        out["beta_slow"] = config.rope_beta_slow
        out["attention_factor"] = yarn_attention_factor(config)
        if not config.rope_yarn_truncate:
            out["truncate"] = False
    return out


def yarn_attention_factor(config: LMConfig) -> float:
    """yarn's cos/sin factor: ``rope_attention_factor``, or 0.1 ln(rope_factor) + 1 when it is None."""
    attention = config.rope_attention_factor
    return 0.1 * math.log(config.rope_factor) + 1.0 if attention is None else float(attention)
