"""StarCoder2 (``Starcoder2ForCausalLM``; Lozhkov et al. 2024) as :class:`LMConfig`: the Llama family's rotary
attention (grouped-query, ``sliding_window`` on every layer) with GPT-2's other blocks: LayerNorm with a bias
(``norm_epsilon``), a feed-forward network that is not gated (``c_fc``, the activation, ``c_proj``), a bias on every
projection when ``use_bias``, the head tied by default.

Every field ``modeling_starcoder2.py`` reads is mapped or refused: ``residual_dropout`` (after attention and the
feed-forward network) and ``embedding_dropout`` are one ``dropout`` (refused when they differ); the RoPE parameters
as :mod:`~transformer.lm.pretrained.rope` reads them.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .llama import Llama

__all__ = ["Starcoder2"]


class Starcoder2(Llama):
    name = "Starcoder2ForCausalLM"
    model_type = "starcoder2"
    needs = "rotary positions, LayerNorm, a feed-forward network not gated, GQA, use_bias, the sliding window"
    names = (
        (r"embed\.0\.lut\.weight", "model.embed_tokens.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.(weight|bias)", r"model.layers.\1.input_layernorm.\2"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.(weight|bias)", r"model.layers.\1.post_attention_layernorm.\2"),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_1\.(weight|bias)", r"model.layers.\1.mlp.c_fc.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.(weight|bias)", r"model.layers.\1.mlp.c_proj.\2"),
        (r"norm\.(weight|bias)", r"model.norm.\1"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )

    max_len_default = 4096
    kv_heads_default = 2
    activation_default = "gelu_pytorch_tanh"
    tie_default = True

    def lm_config(self, config: ConfigFields) -> LMConfig:
        dropout = config.probability("residual_dropout", 0.0)
        if config.probability("embedding_dropout", 0.0) != dropout:
            config.refuse(
                "embedding_dropout",
                config.values["embedding_dropout"],
                f"one dropout is implemented, and residual_dropout={dropout}",
            )
        bias = config.flag("use_bias", True)
        return build_config(
            config.path,
            **self.rotary_attention(config),
            dropout=dropout,
            norm="layer",
            layer_norm_eps=config.number("norm_epsilon", 1e-5),
            ffn_gated=False,
            qkv_bias=bias,
            out_bias=bias,
            ffn_bias=bias,
            sliding_window=config.integer("sliding_window", None, optional=True),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **self.written_rotary_attention(config),
            "residual_dropout": config.dropout,
            "embedding_dropout": config.dropout,
            "norm_epsilon": config.layer_norm_eps,
            "use_bias": config.qkv_bias,
            "sliding_window": config.sliding_window,
        }
