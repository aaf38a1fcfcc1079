"""config.json <-> LMConfig, field by field, as transformers 5.24 reads the same file: RoPE parameters in their
new and old spellings and their defaults (yarn's cos/sin factor against transformers' own function), the window
rules of Qwen2/Qwen3, and which architecture a config of ours is written as."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from transformer.lm import LMConfig
from transformer.lm.pretrained import PretrainedFormatError
from transformer.lm.pretrained.config_fields import ConfigFields
from transformer.lm.pretrained.supported import ARCHITECTURES, architecture_for

LLAMA = {
    "architectures": ["LlamaForCausalLM"], "vocab_size": 50, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
}  # fmt: skip


def _config(kind="LlamaForCausalLM", **fields) -> LMConfig:
    values = {**LLAMA, "architectures": [kind], **fields}
    return ARCHITECTURES[kind].lm_config(ConfigFields(values, Path("config.json")))


def test_rope_parameters_old_and_new_spellings_and_defaults():
    assert _config().rope_theta == 10000.0 and _config().rope_scaling == "none"
    new = _config(rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0})
    old = _config(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=500.0)
    assert new == old and (new.rope_scaling, new.rope_factor, new.rope_theta) == ("linear", 2.0, 500.0)
    llama3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    assert _config(rope_parameters=llama3).rope_original_max_len == 64  # max_position_embeddings when absent
    top = _config(
        rope_parameters={**llama3, "original_max_position_embeddings": 16}, original_max_position_embeddings=8
    )
    assert top.rope_original_max_len == 8  # the top-level field wins, as transformers reads Phi-3's files


@pytest.mark.parametrize(
    "yarn",
    [
        {"factor": 4.0},
        {"factor": 0.5},
        {"factor": 4.0, "mscale": 0.7, "mscale_all_dim": 1.3},
        {"factor": 4.0, "mscale": 0.7},  # one of the two alone: transformers uses the factor only
        {"factor": 4.0, "attention_factor": 0.9, "beta_fast": 16.0, "beta_slow": 2.0},
        {"factor": None, "original_max_position_embeddings": 16, "beta_fast": 0},
    ],
)
def test_yarn_fields_are_transformers_values(yarn):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = {"rope_type": "yarn", "rope_theta": 1000.0, "original_max_position_embeddings": 32, **yarn}
    ours = _config(rope_parameters=dict(rope))
    theirs = transformers.LlamaConfig(**{k: v for k, v in LLAMA.items() if k != "architectures"}, rope_parameters=rope)
    _, attention = ROPE_INIT_FUNCTIONS["yarn"](theirs)
    assert math.isclose(ours.rope_attention_factor, attention, rel_tol=1e-12)
    assert ours.rope_factor == (yarn["factor"] or 64 / 16)
    assert ours.rope_beta_fast == (yarn.get("beta_fast") or 32.0) and ours.rope_beta_slow == yarn.get("beta_slow", 1.0)


def test_qwen_windows_follow_layer_types():
    window = {"use_sliding_window": True, "sliding_window": 6}
    assert _config("Qwen2ForCausalLM", **window, max_window_layers=0).sliding_window == 6
    assert _config("Qwen2ForCausalLM", **window, max_window_layers=2).sliding_window is None  # no layer from 2 on
    assert _config("Qwen2ForCausalLM", **window, layer_types=["sliding_attention"] * 2).sliding_window == 6
    assert _config("Qwen3ForCausalLM", sliding_window=6, max_window_layers=0).sliding_window is None  # not used
    with pytest.raises(PretrainedFormatError, match=r"config.json: field layer_types=\['x'\].*2 entries"):
        _config("Qwen2ForCausalLM", **window, layer_types=["x"])
    assert _config("MistralForCausalLM").sliding_window == 4096  # transformers' default when the field is absent
    assert _config("MistralForCausalLM", sliding_window=None).sliding_window is None


def test_phi3_reads_partial_rotation_and_refuses_its_longrope_spellings_and_residual_dropout():
    phi3 = _config("Phi3ForCausalLM", partial_rotary_factor=0.75)  # the top-level spelling
    assert phi3.rope_fraction == 0.75 and phi3.rotary_dim == 6 and phi3.layer_norm_eps == 1e-5
    for kind in ("yarn", "su", "longrope", "linear"):  # yarn and su are longrope to Phi-3's config
        with pytest.raises(PretrainedFormatError, match=rf"rope_parameters.rope_type='{kind}'.*\['default'\]"):
            _config("Phi3ForCausalLM", rope_parameters={"rope_type": kind, "factor": 2.0})
    with pytest.raises(PretrainedFormatError, match="resid_pdrop=0.1"):
        _config("Phi3ForCausalLM", resid_pdrop=0.1)
    with pytest.raises(PretrainedFormatError, match="partial_rotary_factor=0.5.*whole heads"):
        _config(partial_rotary_factor=0.5)  # Llama rotates whole heads


def test_per_architecture_defaults_and_biases():
    assert _config("Qwen3ForCausalLM").d_k == 128  # Qwen3's head_dim default, not d_model / n_heads
    assert _config("Qwen2ForCausalLM", head_dim=16).d_k == 16  # read by Qwen2's modelling code when present
    qwen2 = _config("Qwen2ForCausalLM")
    assert (qwen2.qkv_bias, qwen2.out_bias, qwen2.ffn_bias, qwen2.qk_norm) == (True, False, False, False)
    llama = _config(attention_bias=True, mlp_bias=True)
    assert (llama.qkv_bias, llama.out_bias, llama.ffn_bias, llama.lm_head_bias) == (True, True, True, False)
    assert _config(num_key_value_heads=4).n_kv_heads is None and _config().n_kv_heads == 2


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_architecture_is_chosen_for_its_own_configs_and_reads_back_what_it_writes(name):
    fields = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    if name == "GPT2LMHeadModel":
        fields = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 50}
    if name == "Phi3ForCausalLM":  # else it is a Llama, which is tried first
        fields["rope_parameters"]["partial_rotary_factor"] = 0.5
    if name in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        fields |= {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 0}
    if name == "GraniteForCausalLM":  # else it is a Llama
        fields |= {"embedding_multiplier": 2.0, "residual_multiplier": 0.5, "logits_scaling": 4.0}
    if name == "SmolLM3ForCausalLM":  # else it is a Llama
        fields["no_rope_layers"] = [1, 0]
    if name == "Gemma3ForCausalLM":  # one RoPE per layer type
        local = {"rope_theta": 10.0}
        fields["rope_parameters"] = {"full_attention": fields["rope_parameters"], "sliding_attention": local}
    config = _config(name, **fields)
    assert architecture_for(config).name == name
    written = ARCHITECTURES[name].writable(config)
    json.dumps(written)  # plain JSON
    assert ARCHITECTURES[name].lm_config(ConfigFields(written, Path("config.json"))) == config
