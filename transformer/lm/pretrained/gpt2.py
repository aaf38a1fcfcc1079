"""GPT-2 (``GPT2LMHeadModel``; Radford et al. 2019) as :class:`LMConfig`: learned positions, LayerNorm before each
sub-layer and at the end, an FFN of ``n_inner`` (4 d_model when null), no output bias, the head tied by default.

Its ``Conv1D`` layers store weights as ``(in, out)``: transposed for our ``nn.Linear``; ``c_attn`` holds the
query, key and value maps side by side. Every field ``modeling_gpt2.py`` reads for the causal LM is mapped or
refused: ``scale_attn_by_inverse_layer_idx`` (a per-layer score factor), ``reorder_and_upcast_attn`` and
``add_cross_attention`` are refused when true; ``scale_attn_weights=false`` is a score factor of 1;
``resid_pdrop`` and ``embd_pdrop`` are one ``dropout`` (refused when they differ); the ``summary_*`` fields belong
to the double-heads model and are not read. Files saved from ``GPT2Model`` (no ``transformer.`` prefix, as the
original release) load too, and the causal-mask buffers ``h.N.attn.bias`` / ``h.N.attn.masked_bias`` of old files
are recognised as buffers (recomputed: our attention is causal by construction), not weights.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .architectures import ACTIVATIONS, Architecture, build_config
from .config_fields import ConfigFields
from .tensor_map import TensorMap
from .written_fields import common_fields, written_activation

__all__ = ["GPT2"]


class GPT2(Architecture):
    name = "GPT2LMHeadModel"
    model_type = "gpt2"
    needs = "learned positions, LayerNorm, GELU's tanh form (gelu_new), no output bias (lm_head_bias=False)"
    base_prefix = "transformer."
    derived_buffers = (r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)",)
    names = (
        (r"embed\.0\.lut\.weight", "transformer.wte.weight"),
        (r"embed\.1\.pe", "transformer.wpe.weight"),
        (r"layers\.(\d+)\.sublayer\.0\.norm\.(weight|bias)", r"transformer.h.\1.ln_1.\2"),
        (r"layers\.(\d+)\.sublayer\.1\.norm\.(weight|bias)", r"transformer.h.\1.ln_2.\2"),
        (r"layers\.(\d+)\.self_attn\.[qkv]_proj\.(weight|bias)", r"transformer.h.\1.attn.c_attn.\2"),
        (r"layers\.(\d+)\.self_attn\.out_proj\.(weight|bias)", r"transformer.h.\1.attn.c_proj.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_1\.(weight|bias)", r"transformer.h.\1.mlp.c_fc.\2"),
        (r"layers\.(\d+)\.feed_forward\.w_2\.(weight|bias)", r"transformer.h.\1.mlp.c_proj.\2"),
        (r"norm\.(weight|bias)", r"transformer.ln_f.\1"),
        (r"generator\.proj\.weight", "lm_head.weight"),
    )

    def lm_config(self, config: ConfigFields) -> LMConfig:
        for field in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            config.require(field, False, False)
        dropout = config.probability("resid_pdrop", 0.1)
        if config.probability("embd_pdrop", 0.1) != dropout:
            config.refuse(
                "embd_pdrop", config.values["embd_pdrop"], f"one dropout is implemented, and resid_pdrop={dropout}"
            )
        d_model = config.integer("n_embd", 768)
        return build_config(
            config.path,
            vocab=config.integer("vocab_size", 50257),
            n_layers=config.integer("n_layer", 12),
            d_model=d_model,
            d_ff=config.integer("n_inner", None, optional=True) or 4 * d_model,
            n_heads=config.integer("n_head", 12),
            max_len=config.integer("n_positions", 1024),
            dropout=dropout,
            attention_dropout=config.probability("attn_pdrop", 0.1),
            norm="layer",
            norm_placement="pre",
            layer_norm_eps=config.number("layer_norm_epsilon", 1e-5),
            positional_encoding="learned",
            embedding_scale=1.0,
            positional_scale=1.0,
            attention_scale=None if config.flag("scale_attn_weights", True) else 1.0,
            activation=config.choice("activation_function", ACTIVATIONS, "gelu_new"),
            ffn_hidden_dropout=False,
            tie_weights=config.flag("tie_word_embeddings", True),
            lm_head_bias=False,
            pad_id=config.integer("pad_token_id", None, at_least=0, optional=True),
        )

    def config_json(self, config: LMConfig) -> dict[str, Any]:
        return {
            **common_fields(self.model_type, config),
            "n_layer": config.n_layers,
            "n_embd": config.d_model,
            "n_inner": config.d_ff,
            "n_head": config.n_heads,
            "n_positions": config.max_len,
            "resid_pdrop": config.dropout,
            "embd_pdrop": config.dropout,
            "attn_pdrop": config.attention_dropout,
            "layer_norm_epsilon": config.layer_norm_eps,
            "scale_attn_weights": config.attention_scale is None,
            "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
            "add_cross_attention": False,
            "activation_function": written_activation(config.activation),
        }

    def tensor_maps(self, our_names: list[str], config: LMConfig | None = None) -> list[TensorMap]:
        """As :meth:`Architecture.tensor_maps`, with each layer's query, key and value maps one fused tensor and
        ``Conv1D`` weights transposed."""
        fused: dict[str, list[str]] = {}
        maps: list[TensorMap] = []
        for name in our_names:
            theirs = self.their_name(name)
            if ".c_attn." in theirs:
                fused.setdefault(theirs, []).append(name)
            elif name.startswith("embed.1."):
                maps.append(TensorMap(theirs, (name,), "batched"))
            elif name.endswith("weight") and (".attn." in theirs or ".mlp." in theirs):
                maps.append(TensorMap(theirs, (name,), "transposed"))
            else:
                maps.append(TensorMap(theirs, (name,)))
        maps += [TensorMap(theirs, tuple(sorted(ours, key=_qkv_order)), "fused") for theirs, ours in fused.items()]
        return maps


def _qkv_order(name: str) -> int:
    return "qkv".index(name.split(".self_attn.")[1][0])
