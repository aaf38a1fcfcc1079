"""The fields of a ``config.json`` that the architectures write alike: one writer of each, which every
architecture's :meth:`~transformer.lm.pretrained.architectures.Architecture.config_json` extends with its own.

The reading side is :mod:`~transformer.lm.pretrained.config_fields` (each architecture's ``lm_config``); writing is
checked by reading back (``Architecture.writable``). :func:`common_fields` are written by every architecture,
GPT-2's included; :func:`standard_fields` add the sizes under transformers' standard names (``PretrainedConfig``'s
``num_hidden_layers``, ``hidden_size``...; every architecture but GPT-2, whose ``n_layer``, ``n_embd``... are its
own); :func:`head_fields` and :func:`layer_kind_fields` are grouped-query attention's heads and the per-layer
attention kinds (Gemma, gpt-oss).
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig

__all__ = [
    "LAYER_KINDS",
    "WRITTEN_ACTIVATIONS",
    "common_fields",
    "head_fields",
    "layer_kind_fields",
    "standard_fields",
    "written_activation",
]

#: LMConfig's ``activation`` -> the name transformers writes (``hidden_act``, ``activation_function``...), what
#: :data:`~transformer.lm.pretrained.architectures.ACTIVATIONS` reads back: the fused tanh GELU is transformers'
#: gelu_pytorch_tanh, the written out one its gelu_new (equal in float32; in half precision each rounds its own way)
WRITTEN_ACTIVATIONS = {
    "silu": "silu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_pytorch_tanh",
    "gelu_new": "gelu_new",
    "relu": "relu",
}

#: ``layer_types``' entries: a layer attends to every earlier position, or through the sliding window
LAYER_KINDS = ("full_attention", "sliding_attention")


def written_activation(activation: str) -> str:
    """transformers' name of LMConfig's ``activation`` (one it does not rename is written as it is)."""
    return WRITTEN_ACTIVATIONS.get(activation, activation)


def common_fields(model_type: str, config: LMConfig) -> dict[str, Any]:
    """The fields every architecture writes alike: ``model_type``, ``vocab_size``, ``tie_word_embeddings`` and
    ``pad_token_id``."""
    return {
        "model_type": model_type,
        "vocab_size": config.vocab,
        "tie_word_embeddings": config.tie_weights,
        "pad_token_id": config.pad_id,
    }


def standard_fields(model_type: str, config: LMConfig) -> dict[str, Any]:
    """:func:`common_fields` and the sizes under transformers' standard names: ``num_hidden_layers``,
    ``hidden_size``, ``intermediate_size``, ``num_attention_heads``, ``max_position_embeddings``, and the attention's
    dropout (``attention_dropout``)."""
    return {
        **common_fields(model_type, config),
        "num_hidden_layers": config.n_layers,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_attention_heads": config.n_heads,
        "max_position_embeddings": config.max_len,
        "attention_dropout": config.attention_dropout,
    }


def head_fields(config: LMConfig) -> dict[str, Any]:
    """Grouped-query attention's heads: ``num_key_value_heads`` and each head's width ``head_dim``."""
    return {"num_key_value_heads": config.kv_heads, "head_dim": config.d_k}


def layer_kind_fields(config: LMConfig) -> dict[str, Any]:
    """``sliding_window`` and ``layer_types``: each layer's kind (:data:`LAYER_KINDS`), from ``window_layers``
    (absent: every layer slides when there is a window, none when there is not)."""
    layers = config.window_layers
    if layers is None:
        layers = (config.sliding_window is not None,) * config.n_layers
    return {"sliding_window": config.sliding_window, "layer_types": [LAYER_KINDS[int(slides)] for slides in layers]}
