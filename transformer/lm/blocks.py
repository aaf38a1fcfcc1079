"""The blocks of the decoder-only model built from an :class:`~transformer.lm.config.LMConfig`, layer by layer.

:func:`build_lm` (:mod:`~transformer.lm.model`) assembles them: the positional table (section 3.5, or none with
rotary positions), and for each layer ``i`` its attention (:func:`attention_for_layer`), its feed-forward network
(:func:`feed_forward_for_layer`, section 3.3: the one place a layer's feed-forward is chosen, so a layer may differ
from the others, as a mixture of experts on some layers) and the layer around them (:func:`decoder_layer`); then the
initialisation (:func:`initialise`: Glorot-uniform, or the functional transformer's).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..layers import PositionwiseFeedForward
from .attention import CausalSelfAttention, PerHeadValueAttention
from .config import LMConfig
from .gated_feed_forward import GatedFeedForward
from .layers import DecoderOnlyLayer, ScaledLearnedPositionalEncoding, ScaledPositionalEncoding

__all__ = [
    "positional_table",
    "attention_for_layer",
    "feed_forward_for_layer",
    "decoder_layer",
    "decoder_layers",
    "initialise",
]


def positional_table(config: LMConfig) -> nn.Module | None:
    """The table of positions added to the embeddings (sinusoidal or learned, times lambda_pe), or None (rotary
    positions, or none)."""
    if config.positional_encoding in ("rotary", "none"):
        return None
    if config.positional_encoding == "learned":
        return ScaledLearnedPositionalEncoding(
            config.d_model, config.dropout, config.max_len, config.positional_scale, config.positional_init
        )
    return ScaledPositionalEncoding(config.d_model, config.dropout, config.max_len, config.positional_scale)


def attention_for_layer(config: LMConfig, i: int) -> nn.Module:
    """The masked self-attention of layer ``i`` (section 3.2): the W^O form (with grouped-query heads) or the
    per-head value form, as ``config.value_projection`` says."""
    kind = PerHeadValueAttention if config.value_projection == "per_head" else CausalSelfAttention
    grouped = {} if kind is PerHeadValueAttention else {"kv_heads": config.kv_heads}  # GQA: the W^O form only
    if config.attention_sinks:  # gpt-oss: learned sinks (the W^O form only: LMConfig checks it)
        grouped["sinks"] = True
    return kind(
        config.n_heads,
        config.d_model,
        config.attention_dropout,
        scale=config.tau,
        backend=config.attention_backend,
        d_k=config.d_k,
        qkv_bias=config.qkv_bias,
        out_bias=config.out_bias,
        qk_norm=config.qk_norm,
        qk_norm_eps=config.layer_norm_eps,
        qk_norm_unit_offset=config.norm_unit_offset,
        softcap=config.attention_softcap,
        qk_norm_scope=config.qk_norm_scope,
        qk_norm_wide_gain=config.float32_gain_and_rotation,
        **grouped,
    )


def feed_forward_for_layer(config: LMConfig, i: int) -> nn.Module:
    """The feed-forward network of layer ``i`` (section 3.3; gated: Shazeer 2020): every layer's is the same today,
    and this is the one place a layer's is chosen."""
    kind = GatedFeedForward if config.ffn_gated else PositionwiseFeedForward
    hidden_dropout = config.dropout if config.ffn_hidden_dropout else 0.0
    return kind(config.d_model, config.d_ff, hidden_dropout, config.activation, bias=config.ffn_bias)


def decoder_layer(config: LMConfig, i: int) -> DecoderOnlyLayer:
    """Layer ``i``: its attention and feed-forward network, each a residual sub-layer with a normalisation."""
    return DecoderOnlyLayer(
        config.d_model,
        attention_for_layer(config, i),
        feed_forward_for_layer(config, i),
        config.dropout,
        config.norm_placement,
        config.layer_norm_eps,
        config.norm,
        post_norm=config.post_sublayer_norm,
        unit_offset=config.norm_unit_offset,
        parallel=config.parallel_residual,
        residual_scale=config.residual_scale,
        pre_norm=config.pre_sublayer_norm,
        wide_gain=config.float32_gain_and_rotation,
    )


def decoder_layers(config: LMConfig) -> nn.ModuleList:
    """Every layer, ``decoder_layer(config, i)`` for each ``i``, each built from the random state layer 0 was built
    from (restored afterwards), as when the stack was one layer's copies: a seeded model initialises to the same
    weights as before the layers were built one by one (what ``initialise`` leaves, as the biases, is layer 0's)."""
    state = torch.random.get_rng_state()
    first = decoder_layer(config, 0)
    rest = []
    for i in range(1, config.n_layers):
        with torch.random.fork_rng(devices=[]):
            torch.random.set_rng_state(state)
            rest.append(decoder_layer(config, i))
    return nn.ModuleList([first, *rest])


def initialise(model: nn.Module, config: LMConfig) -> None:
    """``"xavier"``: Glorot-uniform matrices (each head's value map on its own), as build_model;
    ``"functional"``: the functional transformer's N(0, 1) embeddings, U(+-1/sqrt(fan_in)) weights, zero biases."""
    for module in model.modules():
        if isinstance(module, PerHeadValueAttention):
            for w in module.value_weight:
                bound = 1.0 / math.sqrt(config.d_model)
                nn.init.uniform_(w, -bound, bound) if config.init == "functional" else nn.init.xavier_uniform_(w)
            nn.init.zeros_(module.value_bias)
        elif isinstance(module, nn.Linear):
            if config.init == "functional":
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            else:
                nn.init.xavier_uniform_(module.weight)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight) if config.init == "functional" else nn.init.xavier_uniform_(module.weight)
