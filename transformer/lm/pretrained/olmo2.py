"""OLMo 2 (``Olmo2ForCausalLM``; Team OLMo 2024, "2 OLMo 2 Furious") as :class:`LMConfig`: the Llama family's
model (rotary positions, RMSNorm, SwiGLU, grouped-query attention) with the two changes OLMo 2 made for training
stability, as ``modeling_olmo2.py`` computes them:

* the reordered norm: no norm before a sub-layer, one after it, inside the residual, ``h = x + Norm(Attn(x))``,
  ``out = h + Norm(FFN(h))`` (``post_attention_layernorm``, ``post_feedforward_layernorm``; LMConfig's
  ``pre_sublayer_norm=False, post_sublayer_norm=True``), and the final ``norm``;
* QK-norm over the whole projection: ``q_norm`` (n_heads * head_dim wide) on ``q_proj(x)`` and ``k_norm``
  (n_kv_heads * head_dim) on ``k_proj(x)`` before the heads are split (``qk_norm_scope="projection"``).

Its RMSNorm multiplies the gain before the cast back, and its rotation runs in float32, cast back after
(``float32_gain_and_rotation``): the same numbers as Llama's in float32 and float64, OLMo 2's in bfloat16. Fields:
``attention_bias`` (q, k, v and output projections; the feed-forward network has none: ``mlp_bias`` is not read),
``head_dim`` (not an Olmo2Config field, but read when a file has it: d_model / n_heads when absent), the Llama
family's RoPE rules, ``rms_norm_eps`` (1e-5), ``pad_token_id`` (1), ``max_position_embeddings`` (2048);
``sliding_window`` is not read by its attention or its mask.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .llama import Llama

__all__ = ["Olmo2"]

#: the norms OLMo 2 has: after each sub-layer, never before
_OLMO2_NAMES = (
    (r"layers\.(\d+)\.post_norms\.0\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.post_norms\.1\.weight", r"model.layers.\1.post_feedforward_layernorm.weight"),
)


class Olmo2(Llama):
    name = "Olmo2ForCausalLM"
    model_type = "olmo2"
    needs = (
        "as Llama (attention_bias, no mlp_bias), with the norm after each sub-layer only (pre_sublayer_norm=False, "
        "post_sublayer_norm) and QK-norm over the whole projection (qk_norm_scope='projection')"
    )
    names = _OLMO2_NAMES + tuple(row for row in Llama.names if ".sublayer." not in row[0])
    norm_eps_default = 1e-5

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        attention = config.flag("attention_bias", False)
        return {"qkv_bias": attention, "out_bias": attention, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {"attention_bias": config.qkv_bias}

    def lm_config(self, config: ConfigFields) -> LMConfig:
        fields = super().lm_config(config).to_dict()
        olmo = dict(
            qk_norm=True, qk_norm_scope="projection", pre_sublayer_norm=False, post_sublayer_norm=True,
            float32_gain_and_rotation=True,
        )  # fmt: skip
        return build_config(config.path, **{**fields, **olmo})
