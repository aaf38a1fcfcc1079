"""The Llama family as :class:`LMConfig`: Llama (Touvron et al. 2023), Qwen2, Qwen3 and Mistral (Jiang et al. 2023).

All four are one model in transformers' modelling code (``modeling_llama.py`` and its copies): token embeddings
unscaled, rotary positions on queries and keys (:mod:`~transformer.lm.pretrained.rope`), RMSNorm before each
sub-layer and at the end, grouped-query attention with ``head_dim``, a gated feed-forward network (``gate_proj``
activated, times ``up_proj``, then ``down_proj``), a bias-free head, tied when ``tie_word_embeddings``. They differ
in the fields below, each mapped or refused as transformers 5.24 reads it:

* Llama: ``attention_bias`` (q, k, v and output projections), ``mlp_bias``; ``pretraining_tp`` is not read by its
  modelling code.
* Qwen2: biases on q, k, v (always) and not on the output; a window (``use_sliding_window``, ``sliding_window``)
  on the layers ``layer_types`` marks ``sliding_attention`` (default: those from ``max_window_layers`` on): mapped
  when every layer or none slides, refused naming ``layer_types`` when only some do.
* Qwen3: ``attention_bias``, RMSNorm on each head's queries and keys (``q_norm``, ``k_norm``), ``head_dim``
  defaulting to 128, Qwen2's window rule.
* Mistral: no biases; ``sliding_window`` (4096 when absent, null for none) on every layer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..config import LMConfig
from .architectures import ACTIVATIONS, Architecture, build_config
from .config_fields import ConfigFields
from .rope import rope_fields, rope_parameters
from .written_fields import standard_fields, written_activation

__all__ = ["Llama", "Qwen2", "Qwen3", "Mistral"]


class Llama(Architecture):
    name = "LlamaForCausalLM"
    model_type = "llama"
    needs = "rotary positions (none, linear, llama3, yarn), RMSNorm, SwiGLU, GQA, head_dim, attention_bias, mlp_bias"
    base_prefix = "model."
    derived_buffers = (r"(model\.)?layers\.\d+\.self_attn\.rotary_emb\.inv_freq",)
    names = (
        (r"embed\.0\.lut\.weight", "model.embed_tokens.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.weight", r"model.layers.\1.input_layernorm.weight"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"model.layers.\1.self_attn.\2_proj.\3"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"model.layers.\1.self_attn.o_proj.\2"),
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", r"model.layers.\1.self_attn.\2_norm.weight"),
        (r"layers\.(\d+)\.feed_forward\.w_1\.(weight|bias)", r"model.layers.\1.mlp.gate_proj.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_3\.(weight|bias)", r"model.layers.\1.mlp.up_proj.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.(weight|bias)", r"model.layers.\1.mlp.down_proj.\2"),
        (r"norm\.weight", "model.norm.weight"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )
    #: transformers' defaults for the fields a file may leave out
    max_len_default: ClassVar[int] = 2048
    head_dim_default: ClassVar[int | None] = None
    kv_heads_default: ClassVar[int | None] = None  # None: num_attention_heads
    activation_default: ClassVar[str] = "silu"
    tie_default: ClassVar[bool] = False
    qk_norm: ClassVar[bool] = False  #: RMSNorm on each head's queries and keys (Qwen3)
    norm_eps_default: ClassVar[float] = 1e-6
    rope_rules: ClassVar[tuple[str, ...]] = ("default", "linear", "llama3", "yarn")
    partial_rotary: ClassVar[bool] = False  #: whether partial_rotary_factor is read (rope_fraction)

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        """``qkv_bias``, ``out_bias`` and ``ffn_bias`` of ``config``."""
        attention = config.flag("attention_bias", False)
        return {"qkv_bias": attention, "out_bias": attention, "ffn_bias": config.flag("mlp_bias", False)}

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        """The sliding window every layer attends through (None: none)."""
        return None

    def layer_fields(self, config: ConfigFields, n_layers: int) -> dict[str, Any]:
        """The fields that say what each layer does: the window (:meth:`window`, the same for every layer here)."""
        return {"sliding_window": self.window(config, n_layers)}

    def rotary_attention(self, config: ConfigFields) -> dict[str, Any]:
        """The LMConfig fields every rotary architecture reads alike: sizes, grouped-query heads, RoPE, attention
        dropout, the activation, the bias-free head (tied when ``tie_word_embeddings``) and the pad id."""
        n_heads = config.integer("num_attention_heads")
        n_kv_heads = config.integer("num_key_value_heads", self.kv_heads_default, optional=True)
        return dict(
            vocab=config.integer("vocab_size"),
            n_layers=config.integer("num_hidden_layers"),
            d_model=config.integer("hidden_size"),
            d_ff=config.integer("intermediate_size"),
            n_heads=n_heads,
            n_kv_heads=None if n_kv_heads in (None, n_heads) else n_kv_heads,
            max_len=config.integer("max_position_embeddings", self.max_len_default),
            attention_dropout=config.probability("attention_dropout", 0.0),
            norm_placement="pre",
            embedding_scale=1.0,
            activation=config.choice("hidden_act", ACTIVATIONS, self.activation_default),
            ffn_hidden_dropout=False,
            lm_head_bias=False,
            tie_weights=config.flag("tie_word_embeddings", self.tie_default),
            pad_id=config.integer("pad_token_id", None, at_least=0, optional=True),
            **rope_fields(config, self.rope_rules, self.partial_rotary),
        )

    def written_rotary_attention(self, config: LMConfig) -> dict[str, Any]:
        """The ``config.json`` fields of :meth:`rotary_attention`."""
        return {
            **standard_fields(self.model_type, config),
            "num_key_value_heads": config.kv_heads,
            "hidden_act": written_activation(config.activation),
            "rope_parameters": rope_parameters(config),
        }

    def lm_config(self, config: ConfigFields) -> LMConfig:
        fields = self.rotary_attention(config)
        d_model, n_heads = fields["d_model"], fields["n_heads"]
        head_dim = config.integer("head_dim", self.head_dim_default, optional=True) or d_model // n_heads
        return build_config(
            config.path,
            **fields,
            head_dim=None if head_dim * n_heads == d_model else head_dim,
            dropout=0.0,
            norm="rms",
            layer_norm_eps=config.number("rms_norm_eps", self.norm_eps_default),
            ffn_gated=True,
            qk_norm=self.qk_norm,
            **self.layer_fields(config, fields["n_layers"]),
            **self.biases(config),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **self.written_rotary_attention(config),
            "head_dim": config.d_k,
            "rms_norm_eps": config.layer_norm_eps,
            **self.written_biases(config),
            **self.written_window(config),
        }

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        """The bias fields of ``config.json`` for ``config`` (what :meth:`biases` reads)."""
        return {"attention_bias": config.qkv_bias, "mlp_bias": config.ffn_bias}

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        """The window fields of ``config.json`` for ``config`` (what :meth:`window` reads)."""
        return {}


class Mistral(Llama):
    name = "MistralForCausalLM"
    model_type = "mistral"
    needs = "as Llama, without biases, with the sliding window"
    max_len_default = 4096 * 32

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        return {"qkv_bias": False, "out_bias": False, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {}

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        return config.integer("sliding_window", 4096, optional=True)

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        return {"sliding_window": config.sliding_window}


class Qwen2(Llama):
    name = "Qwen2ForCausalLM"
    model_type = "qwen2"
    needs = "as Llama, with biases on q, k, v only, and the sliding window on all layers or none"
    max_len_default = 32768

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        return {"qkv_bias": True, "out_bias": False, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {}

    def window(self, config: ConfigFields, n_layers: int) -> int | None:
        window = config.integer("sliding_window", 4096, optional=True)
        if not config.flag("use_sliding_window", False):
            window = None
        types = config.values.get("layer_types")
        if types is None:
            first = config.integer("max_window_layers", 28, at_least=0)
            types = [
                "sliding_attention" if window is not None and i >= first else "full_attention" for i in range(n_layers)
            ]
        kinds = {"full_attention", "sliding_attention"}
        if not isinstance(types, list) or len(types) != n_layers or not set(types) <= kinds:
            config.refuse("layer_types", types, f"expected {n_layers} entries, each one of {sorted(kinds)}")
        windows = {window if kind == "sliding_attention" else None for kind in types}
        if len(windows) > 1:
            field = "layer_types" if config.values.get("layer_types") is not None else "max_window_layers"
            config.refuse(
                field,
                config.values.get(field, 28),
                f"it gives a window of {window} to some layers only ({types}); one window for every layer or none "
                "is implemented",
            )
        return windows.pop()

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        window = config.sliding_window
        kind = "full_attention" if window is None else "sliding_attention"
        return {
            "use_sliding_window": window is not None,
            "sliding_window": window,
            "max_window_layers": config.n_layers if window is None else 0,
            "layer_types": [kind] * config.n_layers,
        }


class Qwen3(Qwen2):
    name = "Qwen3ForCausalLM"
    model_type = "qwen3"
    needs = "as Qwen2, with attention_bias (all four projections) and QK-norm"
    head_dim_default = 128
    qk_norm = True

    def biases(self, config: ConfigFields) -> dict[str, bool]:
        attention = config.flag("attention_bias", False)
        return {"qkv_bias": attention, "out_bias": attention, "ffn_bias": False}

    def written_biases(self, config: LMConfig) -> dict[str, Any]:
        return {"attention_bias": config.qkv_bias}
