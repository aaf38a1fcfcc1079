"""Gemma 2 (``Gemma2ForCausalLM``; Team Gemma 2024, "Gemma 2: Improving Open Language Models at a Practical Size")
and the text model of Gemma 3 (``Gemma3ForCausalLM``; Team Gemma 2025) as :class:`LMConfig`.

What they add to the Llama family's model, each an LMConfig block (docs/lm_blocks.md): the ``(1 + weight)``
RMSNorm computed in float32 (``norm_unit_offset``), the embeddings times sqrt(hidden_size) rounded to the weights'
dtype (``embedding_scale_rounded``), a norm before and after each sub-layer (``post_sublayer_norm``: Gemma's
``input_layernorm``, ``post_attention_layernorm``, ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``),
the scores scaled by ``query_pre_attn_scalar ** -0.5`` (``attention_scale``), GeGLU with GELU's tanh form
(``hidden_activation``), the window on the layers ``layer_types`` marks ``sliding_attention`` (``window_layers``;
absent: every other layer from the first in Gemma 2, five of every six in Gemma 3, ``sliding_window_pattern``).
Gemma 2 also caps the attention scores (``attn_logit_softcapping``: ``attention_softcap``) and the logits
(``final_logit_softcapping``: ``logit_softcap``); Gemma 3 adds QK-norm (the same ``(1 + weight)`` RMSNorm) and a
RoPE base of its own for the windowed layers (``rope_parameters.sliding_attention``, older files'
``rope_local_base_freq``: ``rope_local_theta``), the global layers keeping their rule (``rope_parameters.
full_attention``, older files' ``rope_theta`` and ``rope_scaling``). Gemma 3's modelling code reads
``attn_logit_softcapping`` but never passes it to the attention (transformers 5.24): it does not change the
function, and is not read here; ``final_logit_softcapping`` it applies.

Refused by name: ``use_bidirectional_attention`` true (Gemma 3's encoder use); ``sliding_window`` null with a
``sliding_attention`` layer; a rule other than ``default`` for the windowed layers. The multimodal
``Gemma3ForConditionalGeneration`` is refused by name in :mod:`~transformer.lm.pretrained.supported`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..config import LMConfig
from .architectures import ACTIVATIONS, Architecture, build_config
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .rope import rope_fields, rope_parameters
from .written_fields import LAYER_KINDS, head_fields, layer_kind_fields, standard_fields, written_activation

__all__ = ["Gemma2", "Gemma3"]


class Gemma2(Architecture):
    name = "Gemma2ForCausalLM"
    model_type = "gemma2"
    needs = (
        "(1 + weight) RMSNorm, sandwich norms, the embedding scale in the weights' dtype, query_pre_attn_scalar, "
        "attention and final-logit soft-capping, GeGLU (tanh), windows on the sliding_attention layers"
    )
    base_prefix = "model."
    names = (
        (r"embed\.0\.lut\.weight", "model.embed_tokens.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.weight", r"model.layers.\1.input_layernorm.weight"),
        (r"layers\.(\d+)\.post_norms\.0\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.weight", r"model.layers.\1.pre_feedforward_layernorm.weight"),
        (r"layers\.(\d+)\.post_norms\.1\.weight", r"model.layers.\1.post_feedforward_layernorm.weight"),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2"),
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", r"model.layers.\1.self_attn.\2_norm.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_1\.weight", r"model.layers.\1.mlp.gate_proj.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_3\.weight", r"model.layers.\1.mlp.up_proj.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.weight", r"model.layers.\1.mlp.down_proj.weight"),
        (r"norm\.weight", "model.norm.weight"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )
    max_len_default: ClassVar[int] = 8192
    final_softcap_default: ClassVar[float | None] = 30.0
    pattern_default: ClassVar[int] = 2  #: without layer_types: layer i slides unless (i + 1) % pattern == 0
    qk_norm: ClassVar[bool] = False

    # ------------------------------------------------------------------ reading
    def layer_types(self, config: ConfigFields, n_layers: int) -> list[str]:
        """``layer_types``, or transformers' default pattern when absent."""
        types = config.values.get("layer_types")
        if types is None:
            pattern = self.pattern(config)
            return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
        if not isinstance(types, list) or len(types) != n_layers or not set(types) <= set(LAYER_KINDS):
            config.refuse(
                "layer_types", types, f"expected {n_layers} entries (num_hidden_layers), each one of {LAYER_KINDS}"
            )
        return types

    def pattern(self, config: ConfigFields) -> int:
        return self.pattern_default

    def rope(self, config: ConfigFields) -> dict[str, Any]:
        """The rope_* fields (Gemma 2: one rotary embedding, any rule transformers' RoPE functions implement)."""
        return rope_fields(config, ("default", "linear", "llama3", "yarn"))

    def softcaps(self, config: ConfigFields) -> dict[str, Any]:
        return {
            "attention_softcap": config.number("attn_logit_softcapping", 50.0, optional=True),
            "logit_softcap": config.number("final_logit_softcapping", self.final_softcap_default, optional=True),
        }

    def lm_config(self, config: ConfigFields) -> LMConfig:
        if config.values.get("use_bidirectional_attention"):
            config.refuse("use_bidirectional_attention", True, "only causal attention is implemented")
        n_layers = config.integer("num_hidden_layers")
        n_heads = config.integer("num_attention_heads")
        d_model = config.integer("hidden_size")
        n_kv_heads = config.integer("num_key_value_heads", 4)
        head_dim = config.integer("head_dim", 256)
        types = self.layer_types(config, n_layers)
        window = config.integer("sliding_window", 4096, optional=True)
        if window is None and "sliding_attention" in types:
            config.refuse("sliding_window", None, f"layer_types {types} has sliding_attention layers")
        bias = config.flag("attention_bias", False)
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
            norm_unit_offset=True,
            post_sublayer_norm=True,
            norm_placement="pre",
            layer_norm_eps=config.number("rms_norm_eps", 1e-6),
            embedding_scale=d_model**0.5,
            embedding_scale_rounded=True,
            attention_scale=config.number("query_pre_attn_scalar", 256) ** -0.5,
            activation=config.choice("hidden_activation", ACTIVATIONS, "gelu_pytorch_tanh"),
            ffn_gated=True,
            ffn_bias=False,
            ffn_hidden_dropout=False,
            qkv_bias=bias,
            out_bias=bias,
            qk_norm=self.qk_norm,
            lm_head_bias=False,
            tie_weights=config.flag("tie_word_embeddings", True),
            pad_id=config.integer("pad_token_id", 0, at_least=0, optional=True),
            sliding_window=window,
            window_layers=None if window is None else tuple(kind == "sliding_attention" for kind in types),
            **self.rope(config),
            **self.softcaps(config),
        )

    # ------------------------------------------------------------------ writing
    def written_rope(self, config: LMConfig) -> dict[str, Any]:
        return {"rope_parameters": rope_parameters(config)}

    def written_softcaps(self, config: LMConfig) -> dict[str, Any]:
        return {
            "attn_logit_softcapping": config.attention_softcap,
            "final_logit_softcapping": config.logit_softcap,
        }

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        # query_pre_attn_scalar, an int in every Gemma checkpoint; attention_scale None (1/sqrt(d_k)) is d_k, which
        # reads back as the number: writable then names it with every other field that differs
        scalar = config.d_k if config.attention_scale is None else config.attention_scale**-2.0
        if math.isclose(scalar, round(scalar), rel_tol=1e-12):
            scalar = round(scalar)
        return {
            **standard_fields(self.model_type, config),
            **head_fields(config),
            "rms_norm_eps": config.layer_norm_eps,
            "hidden_activation": written_activation(config.activation),
            "query_pre_attn_scalar": scalar,
            "attention_bias": config.qkv_bias,
            **layer_kind_fields(config),
            **self.written_rope(config),
            **self.written_softcaps(config),
        }


class Gemma3(Gemma2):
    name = "Gemma3ForCausalLM"
    model_type = "gemma3_text"
    needs = (
        "as Gemma 2, with QK-norm ((1 + weight) RMSNorm), a RoPE base of its own for the windowed layers "
        "(rope_local_theta), no attention soft-capping"
    )
    max_len_default = 131_072
    final_softcap_default = None
    qk_norm = True

    def pattern(self, config: ConfigFields) -> int:
        return config.integer("sliding_window_pattern", 6)

    def softcaps(self, config: ConfigFields) -> dict[str, Any]:
        # attn_logit_softcapping: read by Gemma3Config, passed to no attention (see the module docstring)
        return {"logit_softcap": config.number("final_logit_softcapping", None, optional=True)}

    def rope(self, config: ConfigFields) -> dict[str, Any]:
        """Two rotary embeddings: ``rope_parameters.full_attention`` (any rule) for the global layers, and the
        default rule at ``rope_parameters.sliding_attention``'s base for the windowed ones."""
        nested = config.values.get("rope_parameters")
        # transformers 5.4 also writes a flat rope_type (and rope_theta: null) beside the two, read by no model code
        if (
            isinstance(nested, dict)
            and set(nested) & set(LAYER_KINDS)
            and set(nested) <= {*LAYER_KINDS, "rope_type", "rope_theta"}
        ):
            full, local = nested.get("full_attention"), nested.get("sliding_attention")
        elif nested is None:  # older files: rope_theta and rope_scaling for the global layers, rope_local_base_freq
            full = {"rope_type": "default", **(config.values.get("rope_scaling") or {})}
            full.setdefault("rope_theta", config.number("rope_theta", 1_000_000.0))
            local = {"rope_type": "default", "rope_theta": config.number("rope_local_base_freq", 10_000.0)}
        else:
            config.refuse("rope_parameters", nested, f"expected an object of {list(LAYER_KINDS)}, one RoPE each")
        for kind, part in (("full_attention", full), ("sliding_attention", local)):
            if not isinstance(part, dict):
                config.refuse(f"rope_parameters.{kind}", part, "expected a JSON object of RoPE parameters")
        values = {k: v for k, v in config.values.items() if k not in ("rope_scaling", "rope_theta")}
        fields = rope_fields(ConfigFields({**values, "rope_parameters": full}, config.path))
        local_fields = rope_fields(ConfigFields({**values, "rope_parameters": local}, config.path), ("default",))
        return {**fields, "rope_local_theta": local_fields["rope_theta"]}

    def written_rope(self, config: LMConfig) -> dict[str, Any]:
        local = config.rope_theta if config.rope_local_theta is None else config.rope_local_theta
        return {
            "rope_parameters": {
                "full_attention": rope_parameters(config),
                "sliding_attention": {"rope_type": "default", "rope_theta": local},
            }
        }

    def written_softcaps(self, config: LMConfig) -> dict[str, Any]:
        if config.attention_softcap is not None:
            raise PretrainedFormatError(
                f"LMConfig cannot be written as {self.name}: attention_softcap={config.attention_softcap!r} "
                "(Gemma 3's attention caps no scores)"
            )
        return {"final_logit_softcapping": config.logit_softcap}
