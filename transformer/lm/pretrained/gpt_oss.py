"""gpt-oss (``GptOssForCausalLM``; OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", section 2) as
:class:`LMConfig`: Llama's rotary, pre-RMSNorm decoder with grouped-query attention (biases on q, k, v and o when
``attention_bias``, default true), learned attention sinks in every layer (``self_attn.sinks``, one logit per query
head; docs/attention.md, "Attention sinks"), a window on the layers ``layer_types`` marks ``sliding_attention``
(default: every even-indexed layer, ``sliding_window`` 128) and a mixture of experts in every layer
(:mod:`~transformer.lm.moe`):

* the router (``mlp.router.weight``, ``mlp.router.bias``): the softmax of the top ``num_experts_per_tok`` logits
  (LMConfig's ``router_softmax_topk``), ties as ``torch.topk`` of the logits, as theirs;
* ``num_local_experts`` clamped SwiGLU experts of width ``intermediate_size`` with biases
  (:class:`~transformer.lm.moe.clamped_experts.ClampedSwiGLUExperts`: ``swiglu_limit``, ``swiglu_alpha``, the
  ``(up + 1)`` term), stacked and interleaved exactly as the files hold them (``mlp.experts.gate_up_proj``
  (n_experts, d_model, 2 d_ff), gate in the even columns, ``gate_up_proj_bias``, ``down_proj``, ``down_proj_bias``):
  transformers 5 converts nothing for gpt-oss, so our tensors are the files' element for element.

Fields: ``router_aux_loss_coef`` kept for fine-tuning; ``output_router_logits`` a switch of their forward, not
read; ``hidden_act`` not read by their modelling code (the experts' activation is the clamped SwiGLU); a
``quantization_config`` (the Hub's MXFP4 files: ``gate_up_proj_blocks`` and ``_scales``) refused by name (dequantise
with transformers first). RoPE: every rule of :mod:`~transformer.lm.pretrained.rope` (gpt-oss's own files use yarn
with ``truncate: false``, which is refused by name until that rule is implemented).
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import build_config
from .config_fields import ConfigFields
from .llama import Llama
from .rope import rope_fields, rope_parameters
from .written_fields import LAYER_KINDS, head_fields, layer_kind_fields, standard_fields

__all__ = ["GptOss"]


class GptOss(Llama):
    name = "GptOssForCausalLM"
    model_type = "gpt_oss"
    needs = (
        "as Llama (attention_bias), attention sinks, sliding/full layers (layer_types), the softmax of the top-k "
        "router logits (router bias), clamped SwiGLU experts with biases"
    )
    names = (
        (r"embed\.0\.lut\.weight", "model.embed_tokens.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.weight", r"model.layers.\1.input_layernorm.weight"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2"),
        (r"layers\.(\d+)\.self_attn\.sinks", r"model.layers.\1.self_attn.sinks"),
        (r"layers\.(\d+)\.feed_forward\.router\.(weight|bias)", r"model.layers.\1.mlp.router.\2"),
        (
            r"layers\.(\d+)\.feed_forward\.experts\.(gate_up_proj|gate_up_proj_bias|down_proj|down_proj_bias)",
            r"model.layers.\1.mlp.experts.\2",
        ),
        (r"norm\.weight", "model.norm.weight"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )
    max_len_default = 131072
    head_dim_default = 64
    norm_eps_default = 1e-5

    def layer_types(self, config: ConfigFields, n_layers: int) -> list[str]:
        """``layer_types``, or transformers' default: layer i slides when i is even."""
        types = config.values.get("layer_types")
        if types is None:
            return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]
        if not isinstance(types, list) or len(types) != n_layers or not set(types) <= set(LAYER_KINDS):
            config.refuse(
                "layer_types", types, f"expected {n_layers} entries (num_hidden_layers), each one of {LAYER_KINDS}"
            )
        return types

    def lm_config(self, config: ConfigFields) -> LMConfig:
        if config.values.get("quantization_config") is not None:
            config.refuse(
                "quantization_config",
                config.values["quantization_config"],
                "quantised experts (MXFP4) are not implemented: dequantise with transformers and save_pretrained first",
            )
        n_layers = config.integer("num_hidden_layers")
        n_heads = config.integer("num_attention_heads")
        d_model = config.integer("hidden_size")
        n_kv_heads = config.integer("num_key_value_heads", 8)
        head_dim = config.integer("head_dim", self.head_dim_default, optional=True) or d_model // n_heads
        types = self.layer_types(config, n_layers)
        window = config.integer("sliding_window", 128, optional=True)
        if window is None and "sliding_attention" in types:
            config.refuse("sliding_window", None, f"layer_types {types} has sliding_attention layers")
        if "sliding_attention" not in types:
            window = None
        bias = config.flag("attention_bias", True)
        n_experts = config.integer("num_local_experts", config.integer("num_experts", 128))
        return build_config(
            config.path,
            vocab=config.integer("vocab_size"),
            n_layers=n_layers,
            d_model=d_model,
            d_ff=config.integer("intermediate_size"),
            n_heads=n_heads,
            n_kv_heads=None if n_kv_heads == n_heads else n_kv_heads,
            head_dim=None if head_dim * n_heads == d_model else head_dim,
            max_len=config.integer("max_position_embeddings", self.max_len_default),
            dropout=0.0,
            attention_dropout=config.probability("attention_dropout", 0.0),
            norm="rms",
            norm_placement="pre",
            layer_norm_eps=config.number("rms_norm_eps", self.norm_eps_default),
            embedding_scale=1.0,
            activation="silu",
            ffn_gated=True,
            ffn_bias=False,
            ffn_hidden_dropout=False,
            qkv_bias=bias,
            out_bias=bias,
            lm_head_bias=False,
            tie_weights=config.flag("tie_word_embeddings", False),
            pad_id=config.integer("pad_token_id", None, at_least=0, optional=True),
            sliding_window=window,
            window_layers=None if window is None else tuple(kind == "sliding_attention" for kind in types),
            n_experts=n_experts,
            experts_per_token=config.integer("num_experts_per_tok", 4),
            router_bias=True,
            router_norm_topk=False,
            router_softmax_topk=True,
            router_aux_loss_coef=config.number("router_aux_loss_coef", 0.001, positive=False),
            attention_sinks=True,
            expert_swiglu_limit=config.number("swiglu_limit", 7.0),
            expert_swiglu_alpha=config.number("swiglu_alpha", 1.702),
            **rope_fields(config, self.rope_rules, self.partial_rotary),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **standard_fields(self.model_type, config),
            **head_fields(config),
            "rms_norm_eps": config.layer_norm_eps,
            "attention_bias": config.qkv_bias,
            **layer_kind_fields(config),
            "num_local_experts": config.n_experts,
            "num_experts_per_tok": config.experts_per_token,
            "router_aux_loss_coef": config.router_aux_loss_coef,
            "swiglu_limit": config.expert_swiglu_limit,
            "swiglu_alpha": config.expert_swiglu_alpha,
            "rope_parameters": rope_parameters(config),
        }
