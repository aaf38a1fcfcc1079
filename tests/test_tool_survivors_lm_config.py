"""Tests for the mutants of transformer/lm/config.py and config_checks.py that mutmut's run left alive.

Each test names the promise it checks (the docstring it comes from); tests/mutation/tool_runs/lm_config.json names
the mutants it kills (scripts/mutation_tool.py, issue 31).
"""

from __future__ import annotations

import math

import pytest

from transformer.lm import LMConfig

SIZES = {"d_model": 16, "n_heads": 2, "d_ff": 8, "n_layers": 1}
ROTARY = {"positional_encoding": "rotary"}
YARN = {**ROTARY, "rope_scaling": "yarn", "rope_factor": 2.0, "rope_original_max_len": 64}


def test_the_functional_formulation_sets_every_value_its_docstring_names():
    """LMConfig.functional: lambda_e = d_model^-0.5, lambda_pe = 1, tau = 1/sqrt(d_k), ``standardize`` with eps
    1e-5, zero-initialised learned positions, per-head values to d_model, no dropout, pre-norm, ReLU, its
    initialisation; without a d_model, the default d_model's (512, the paper's) lambda_e."""
    expected = {
        "norm": "std",
        "layer_norm_eps": 1e-5,
        "positional_encoding": "learned",
        "positional_init": "zeros",
        "positional_scale": 1.0,
        "value_projection": "per_head",
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "norm_placement": "pre",
        "activation": "relu",
        "init": "functional",
    }
    for d_model, n_heads in ((None, None), (24, 3)):
        sizes = {} if d_model is None else {"d_model": d_model, "n_heads": n_heads, "d_ff": 8, "n_layers": 1}
        config = LMConfig.functional(vocab=13, **sizes)
        for field, value in expected.items():
            assert getattr(config, field) == value, field
        width, heads = (512, 8) if d_model is None else (d_model, n_heads)
        assert math.isclose(config.embedding_scale, width**-0.5)
        assert math.isclose(config.lambda_e, width**-0.5)
        assert math.isclose(config.tau, 1 / math.sqrt(width // heads))


def test_fields_given_to_the_functional_formulation_win():
    """``fields`` change any of these or set the sizes."""
    config = LMConfig.functional(vocab=13, d_model=16, n_heads=2, d_ff=8, positional_scale=0.5, activation="gelu")
    assert (config.positional_scale, config.activation, config.d_model) == (0.5, "gelu", 16)
    assert math.isclose(config.embedding_scale, 16**-0.5)


def test_head_dim_is_d_k_when_it_is_not_d_model_over_n_heads():
    """head_dim: d_k when it is not d_model / n_heads (the projections map d_model to n_heads * head_dim)."""
    config = LMConfig(vocab=13, d_model=16, n_heads=2, d_ff=8, n_layers=1, head_dim=4)
    assert config.d_k == 4
    assert LMConfig(vocab=13, d_model=16, n_heads=2, d_ff=8, n_layers=1).d_k == 8


def test_rope_fields_outside_rotary_positions_are_each_named_once_in_the_message():
    """config_checks: rope_* fields off their defaults need positional_encoding='rotary': the error lists every
    changed field as ``name=value``, separated by ', '."""
    with pytest.raises(ValueError) as error:
        LMConfig(vocab=13, d_model=16, n_heads=2, d_ff=8, n_layers=1, rope_theta=500.0, rope_fraction=0.5)
    message = str(error.value)
    assert "rope_theta=500.0, rope_fraction=0.5 only applies to rotary positions" in message
    assert "got positional_encoding='sinusoidal'" in message


#: Every refusal of LMConfig's fields (LMConfig and config_checks: "construction refuses an impossible model naming
#: the field"; "each check raises ValueError naming the field and its value (and the field it depends on)"), with
#: the whole message: the prefix, the field, the rule and the value given.
REFUSALS = [
    ({"n_layers": 0}, "LMConfig: n_layers must be positive, got n_layers=0"),
    ({"d_ff": 2.0}, "LMConfig: d_ff must be an int, got 2.0 (float)"),
    ({"norm": "batch"}, "LMConfig: norm must be one of 'layer', 'std', 'rms'; got 'batch'"),
    ({"qk_norm": 1}, "LMConfig: qk_norm must be a bool, got qk_norm=1"),
    ({"lm_head_bias": None}, "LMConfig: lm_head_bias must be a bool, got lm_head_bias=None"),
    *[
        ({**ROTARY, name: bad}, f"LMConfig: {name} must be a positive float, got {name}={bad!r}")
        for name in ("rope_theta", "rope_factor", "rope_beta_fast")
        for bad in (math.inf, math.nan, 0.0, -1.0)
    ],
    *[
        (
            {**YARN, "rope_attention_factor": bad},
            f"LMConfig: rope_attention_factor must be a positive float or None, got rope_attention_factor={bad!r}",
        )
        for bad in (math.inf, math.nan, 0.0, -0.5)
    ],
    *[
        ({name: bad}, f"LMConfig: {name} must be a positive float, got {name}={bad!r}")
        for name in ("embedding_scale", "attention_scale", "positional_scale", "layer_norm_eps")
        for bad in (math.inf, math.nan, 0.0)
    ],
    ({"tie_weights": 1}, "LMConfig: tie_weights must be a bool, got 1"),
    ({"ffn_hidden_dropout": "yes"}, "LMConfig: ffn_hidden_dropout must be a bool, got 'yes'"),
    (
        {"d_model": 18, "n_heads": 4, "value_projection": "per_head", "head_dim": 4},
        "LMConfig: n_heads=4 does not divide d_model=18 (d_k = d_model / n_heads must be an integer); head counts that "
        "would: [1, 2, 3, 6, 9, 18]; or set head_dim",
    ),
    (
        {"d_model": 15, "n_heads": 3},
        "LMConfig: d_model=15 is odd: sinusoidal positional encoding needs an even d_model (or use "
        "positional_encoding='learned')",
    ),
    (
        {"positional_init": "zeros"},
        "LMConfig: positional_init='zeros' needs positional_encoding='learned' (sinusoids are fixed), got "
        "positional_encoding='sinusoidal'",
    ),
    ({"pad_id": -1}, "LMConfig: pad_id=-1 must be a token id in [0, 13) or None"),
    ({"pad_id": 13}, "LMConfig: pad_id=13 must be a token id in [0, 13) or None"),
    ({"rope_fraction": 0.0}, "LMConfig: rope_fraction must be a float in (0, 1], got rope_fraction=0.0"),
    *[
        ({name: bad}, f"LMConfig: {name} must be a positive int or None, got {name}={bad!r}")
        for name in ("head_dim", "sliding_window", "rope_original_max_len")
        for bad in (0, 2.0)
    ],
    (
        {**ROTARY, "rope_fraction": 0.1},
        "LMConfig: rope_fraction=0.1 rotates int(d_k * rope_fraction) = 0 of each head's d_k=8 dimensions; RoPE "
        "rotates pairs, so that must be even and > 0",
    ),
    (
        {**ROTARY, "positional_scale": 2.0},
        "LMConfig: positional_scale=2.0 scales a table of positions, and positional_encoding='rotary' has none",
    ),
    (
        {**ROTARY, "rope_scaling": "yarn", "rope_factor": 2.0},
        "LMConfig: rope_scaling='yarn' needs rope_original_max_len (the checkpoint's original_max_position_embeddings),"
        " got rope_original_max_len=None",
    ),
    (
        {"rope_theta": 500.0, "rope_fraction": 0.5},
        "LMConfig: rope_theta=500.0, rope_fraction=0.5 only applies to rotary positions; set "
        "positional_encoding='rotary' (got positional_encoding='sinusoidal') or leave the rope_* fields at their "
        "defaults",
    ),
    (
        {"value_projection": "per_head", "head_dim": 4, "qkv_bias": False, "out_bias": False},
        "LMConfig: head_dim=4, qkv_bias=False, out_bias=False needs value_projection='output' (the per-head form's "
        "values are the shared input in d_model / n_heads chunks, mapped by each head's own W_i and b_i; it has no W^V "
        "or W^O), got value_projection='per_head'",
    ),
]


@pytest.mark.parametrize(("fields", "message"), REFUSALS, ids=lambda x: str(x)[:60])
def test_every_refusal_names_the_field_the_rule_and_the_value(fields, message):
    with pytest.raises(ValueError) as error:
        LMConfig(vocab=13, **{**SIZES, **fields})
    assert str(error.value) == message


def test_the_edges_of_the_ranges_are_accepted():
    """The smallest legal values: a window of one position (i - 1 < j <= i), a head_dim of one, rope_fraction 1,
    a positive rope_attention_factor below one; per_head values with head_dim = d_model / n_heads (the same d_k)."""
    assert LMConfig(vocab=13, **SIZES, sliding_window=1).sliding_window == 1
    assert LMConfig(vocab=13, **SIZES, head_dim=1).d_k == 1
    assert LMConfig(vocab=13, **SIZES, **ROTARY, rope_fraction=1.0).rotary_dim == 8
    assert LMConfig(vocab=13, **SIZES, **YARN, rope_attention_factor=0.5).rope_attention_factor == 0.5
    assert LMConfig(vocab=13, **SIZES, **YARN, rope_attention_factor=2.0).rope_attention_factor == 2.0
    assert LMConfig(vocab=13, **SIZES, value_projection="per_head", head_dim=8).d_k == 8
    assert LMConfig(vocab=13, **{**SIZES, "d_model": 18, "n_heads": 4}, head_dim=4).d_k == 4  # head_dim: no divisor
