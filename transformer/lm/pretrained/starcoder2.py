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
from .architectures import ACTIVATIONS, build_config
from .config_fields import ConfigFields
from .llama import Llama
from .rope import rope_fields, rope_parameters

__all__ = ["Starcoder2"]

_WRITTEN_ACTIVATION = {"gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu", "relu": "relu", "silu": "silu"}


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

    def lm_config(self, config: ConfigFields) -> LMConfig:
        dropout = config.probability("residual_dropout", 0.0)
        if config.probability("embedding_dropout", 0.0) != dropout:
            config.refuse(
                "embedding_dropout",
                config.values["embedding_dropout"],
                f"one dropout is implemented, and residual_dropout={dropout}",
            )
        n_heads = config.integer("num_attention_heads", 24)
        n_kv_heads = config.integer("num_key_value_heads", 2)
        bias = config.flag("use_bias", True)
        return build_config(
            config.path,
            vocab=config.integer("vocab_size", 49152),
            n_layers=config.integer("num_hidden_layers", 30),
            d_model=config.integer("hidden_size", 3072),
            d_ff=config.integer("intermediate_size", 12288),
            n_heads=n_heads,
            n_kv_heads=None if n_kv_heads == n_heads else n_kv_heads,
            max_len=config.integer("max_position_embeddings", 4096),
            dropout=dropout,
            attention_dropout=config.probability("attention_dropout", 0.0),
            norm="layer",
            norm_placement="pre",
            layer_norm_eps=config.number("norm_epsilon", 1e-5),
            embedding_scale=1.0,
            activation=config.choice("hidden_act", ACTIVATIONS, "gelu_pytorch_tanh"),
            ffn_gated=False,
            ffn_hidden_dropout=False,
            qkv_bias=bias,
            out_bias=bias,
            ffn_bias=bias,
            lm_head_bias=False,
            tie_weights=config.flag("tie_word_embeddings", True),
            sliding_window=config.integer("sliding_window", None, optional=True),
            pad_id=config.integer("pad_token_id", None, at_least=0, optional=True),
            **rope_fields(config),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            "model_type": self.model_type,
            "vocab_size": config.vocab,
            "num_hidden_layers": config.n_layers,
            "hidden_size": config.d_model,
            "intermediate_size": config.d_ff,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": config.kv_heads,
            "max_position_embeddings": config.max_len,
            "residual_dropout": config.dropout,
            "embedding_dropout": config.dropout,
            "attention_dropout": config.attention_dropout,
            "norm_epsilon": config.layer_norm_eps,
            "hidden_act": _WRITTEN_ACTIVATION.get(config.activation, config.activation),
            "use_bias": config.qkv_bias,
            "tie_word_embeddings": config.tie_weights,
            "sliding_window": config.sliding_window,
            "rope_parameters": rope_parameters(config),
            "pad_token_id": config.pad_id,
        }
