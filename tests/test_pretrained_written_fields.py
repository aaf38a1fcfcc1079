"""The ``config.json`` fields the architectures write alike come from one writer each
(``transformer/lm/pretrained/written_fields.py``): every architecture's ``config.json`` holds :func:`common_fields`,
every one but GPT-2's :func:`standard_fields` (GPT-2 names its sizes its own way), Gemma's and gpt-oss's
:func:`head_fields` and :func:`layer_kind_fields`; each is read back as the same LMConfig (``writable``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from transformer.lm import LMConfig
from transformer.lm.pretrained.config_fields import ConfigFields
from transformer.lm.pretrained.supported import ARCHITECTURES
from transformer.lm.pretrained.written_fields import (
    LAYER_KINDS,
    common_fields,
    head_fields,
    layer_kind_fields,
    standard_fields,
    written_activation,
)

#: one file every architecture reads (each its own names), with values no default has: a pad id, a tied head, an
#: attention dropout, grouped heads of width 8
_FILE = {
    "vocab_size": 40, "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 24, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 48, "attention_dropout": 0.125,
    "tie_word_embeddings": True, "pad_token_id": 3,
    "n_layer": 2, "n_embd": 32, "n_head": 4, "n_inner": 24, "n_positions": 48, "attn_pdrop": 0.125,
}  # fmt: skip


def _written(name: str) -> tuple[LMConfig, dict]:
    architecture = ARCHITECTURES[name]
    config = architecture.lm_config(ConfigFields(_FILE, Path(f"<{name}>")))
    return config, architecture.writable(config)


def _holds(written: dict, fields: dict) -> bool:
    return all(k in written and written[k] == v for k, v in fields.items())


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_every_architecture_writes_the_shared_fields(name):
    config, written = _written(name)
    model_type = ARCHITECTURES[name].model_type
    assert common_fields(model_type, config) == {
        "model_type": model_type, "vocab_size": 40, "tie_word_embeddings": True, "pad_token_id": 3,
    }  # fmt: skip
    assert _holds(written, common_fields(model_type, config))
    if name == "GPT2LMHeadModel":
        assert "num_hidden_layers" not in written and written["n_layer"] == 2
    else:
        assert _holds(written, standard_fields(model_type, config))
        assert written["attention_dropout"] == 0.125 and written["max_position_embeddings"] == 48
    if name in ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "GptOssForCausalLM"):
        assert _holds(written, {**head_fields(config), **layer_kind_fields(config)})
        assert written["num_key_value_heads"] == 2 and written["head_dim"] == 8


def test_layer_kinds_follow_window_layers_or_the_window():
    base = dict(vocab=20, n_layers=3, d_model=16, d_ff=24, n_heads=2, positional_encoding="rotary", norm="rms")
    some = LMConfig(**base, sliding_window=4, window_layers=(True, False, True))
    assert layer_kind_fields(some) == {
        "sliding_window": 4,
        "layer_types": [LAYER_KINDS[1], LAYER_KINDS[0], LAYER_KINDS[1]],
    }
    assert layer_kind_fields(LMConfig(**base, sliding_window=4))["layer_types"] == ["sliding_attention"] * 3
    assert layer_kind_fields(LMConfig(**base)) == {"sliding_window": None, "layer_types": ["full_attention"] * 3}
    assert head_fields(LMConfig(**base, n_kv_heads=1)) == {"num_key_value_heads": 1, "head_dim": 8}


def test_activations_are_written_under_transformers_names():
    assert written_activation("gelu_tanh") == "gelu_pytorch_tanh" and written_activation("silu") == "silu"
    assert written_activation("gelu_new") == "gelu_new" and written_activation("something") == "something"
