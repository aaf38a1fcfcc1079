"""GPT-NeoX (``GPTNeoXForCausalLM``; Black et al. 2022, "GPT-NeoX-20B") and the Pythia suite (Biderman et al.
2023), which is GPT-NeoX, as :class:`LMConfig`.

As ``modeling_gpt_neox.py`` computes it: unscaled token embeddings, LayerNorm with a bias (``layer_norm_eps``)
before attention and before the feed-forward network, which read the layer's input side by side when
``use_parallel_residual`` (``parallel_residual``: ``x + Attn(LN_1(x)) + MLP(LN_2(x))``, section 2.1 of the paper),
one after the other otherwise; rotary positions on the first ``partial_rotary_factor`` of each head (older files:
``rotary_pct``, 0.25 when absent; the base ``rotary_emb_base``), the default or linear rule; the query, key and
value maps stored as one ``query_key_value`` whose rows go head by head (head h's query, key, value: our three maps
interleaved per head, the ``"interleaved"`` layout), with ``attention_bias`` on it and on ``dense``; a feed-forward
network not gated with biases (``dense_h_to_4h``, ``hidden_act``, ``dense_4h_to_h``); an untied head by default
(the module ``lm_head``, which transformers 5.24 writes as ``embed_out``, Pythia's name; a file naming it
``lm_head`` loads too). ``hidden_dropout`` drops the embeddings and both sub-layers' outputs (our
``dropout``), ``attention_dropout`` the probabilities; ``classifier_dropout`` serves other heads and is not read.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import ACTIVATIONS, Architecture, build_config
from .config_fields import ConfigFields
from .rope import rope_fields, rope_parameters
from .tensor_map import TensorMap
from .written_fields import standard_fields, written_activation

__all__ = ["GPTNeoX"]


class GPTNeoX(Architecture):
    name = "GPTNeoXForCausalLM"
    model_type = "gpt_neox"
    needs = (
        "parallel residual (parallel_residual), partial rotary positions (rope_fraction), LayerNorm, a feed-forward "
        "network not gated, query_key_value interleaved per head"
    )
    base_prefix = "gpt_neox."
    derived_buffers = (
        r"(gpt_neox\.)?layers\.\d+\.attention\.(bias|masked_bias)",
        r"(gpt_neox\.)?layers\.\d+\.attention\.rotary_emb\.inv_freq",
    )
    names = (
        (r"embed\.0\.lut\.weight", "gpt_neox.embed_in.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.(weight|bias)", r"gpt_neox.layers.\1.input_layernorm.\2"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.(weight|bias)", r"gpt_neox.layers.\1.post_attention_layernorm.\2"),
        (r"layers\.(\d+)\.self_attn\.[qkv]_proj\.(weight|bias)", r"gpt_neox.layers.\1.attention.query_key_value.\2"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"gpt_neox.layers.\1.attention.dense.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_1\.(weight|bias)", r"gpt_neox.layers.\1.mlp.dense_h_to_4h.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.(weight|bias)", r"gpt_neox.layers.\1.mlp.dense_4h_to_h.\2"),
        (r"norm\.(weight|bias)", r"gpt_neox.final_layer_norm.\1"),
        (r"generator\.proj\.weight", "embed_out.weight"),
    )

    def _rope(self, config: ConfigFields) -> dict[str, Any]:
        """transformers' ``convert_rope_params_to_dict``: ``rope_scaling`` over ``rope_parameters``, then
        ``rope_theta`` from ``rotary_emb_base`` (10000) and ``partial_rotary_factor`` from ``rotary_pct`` (0.25)
        where absent."""
        nested = config.values.get("rope_scaling") or config.values.get("rope_parameters") or {}
        if not isinstance(nested, dict):
            config.refuse("rope_parameters", nested, "expected a JSON object of RoPE parameters")
        nested = dict(nested)
        nested.setdefault("rope_theta", config.number("rotary_emb_base", 10000.0))
        nested.setdefault("partial_rotary_factor", config.number("rotary_pct", 0.25))
        values = {k: v for k, v in config.values.items() if k not in ("rope_scaling", "rope_theta")}
        return rope_fields(
            ConfigFields({**values, "rope_parameters": nested}, config.path), ("default", "linear"), True
        )

    def lm_config(self, config: ConfigFields) -> LMConfig:
        bias = config.flag("attention_bias", True)
        return build_config(
            config.path,
            vocab=config.integer("vocab_size"),
            n_layers=config.integer("num_hidden_layers"),
            d_model=config.integer("hidden_size"),
            d_ff=config.integer("intermediate_size"),
            n_heads=config.integer("num_attention_heads"),
            max_len=config.integer("max_position_embeddings", 2048),
            dropout=config.probability("hidden_dropout", 0.0),
            attention_dropout=config.probability("attention_dropout", 0.0),
            norm="layer",
            norm_placement="pre",
            layer_norm_eps=config.number("layer_norm_eps", 1e-5),
            embedding_scale=1.0,
            activation=config.choice("hidden_act", ACTIVATIONS, "gelu"),
            ffn_gated=False,
            ffn_bias=True,
            ffn_hidden_dropout=False,
            qkv_bias=bias,
            out_bias=bias,
            lm_head_bias=False,
            tie_weights=config.flag("tie_word_embeddings", False),
            pad_id=config.integer("pad_token_id", None, at_least=0, optional=True),
            parallel_residual=config.flag("use_parallel_residual", True),
            **self._rope(config),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        rope = rope_parameters(config)
        rope.setdefault("partial_rotary_factor", 1.0)  # absent reads as 0.25
        return {
            **standard_fields(self.model_type, config),
            "hidden_dropout": config.dropout,
            "layer_norm_eps": config.layer_norm_eps,
            "hidden_act": written_activation(config.activation),
            "attention_bias": config.qkv_bias,
            "use_parallel_residual": config.parallel_residual,
            "rope_parameters": rope,
        }

    def tensor_maps(self, our_names: list[str], config: LMConfig | None = None) -> list[TensorMap]:
        """As :meth:`Architecture.tensor_maps`, with q, k and v one ``query_key_value`` tensor, interleaved per
        head (``config.n_heads`` of them: required)."""
        if config is None:
            raise ValueError(f"{self.name}.tensor_maps: query_key_value is split by heads, so config is required")
        fused: dict[str, list[str]] = {}
        maps: list[TensorMap] = []
        for name in our_names:
            theirs = self.their_name(name)
            if ".query_key_value." in theirs:
                fused.setdefault(theirs, []).append(name)
            else:
                maps.append(TensorMap(theirs, (name,)))
        return maps + [
            TensorMap(
                theirs,
                tuple(sorted(ours, key=lambda n: "qkv".index(n.split(".")[-2][0]))),
                "interleaved",
                heads=config.n_heads,
            )  # fmt: skip
            for theirs, ours in fused.items()
        ]

    def maps_for_file(
        self, our_names: list[str], file_names: list[str], config: LMConfig | None = None
    ) -> list[TensorMap]:
        """As :meth:`Architecture.maps_for_file`; the head may be named ``lm_head`` (the module's name) instead of
        ``embed_out`` (the name transformers writes)."""
        maps = super().maps_for_file(our_names, file_names, config)
        if "lm_head.weight" in file_names and "embed_out.weight" not in file_names:
            maps = [TensorMap("lm_head.weight", m.ours) if m.theirs == "embed_out.weight" else m for m in maps]
        return maps
