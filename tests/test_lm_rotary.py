"""Rotary position embeddings (transformer/lm/rotary.py): the inverse frequencies of every scaling rule against
transformers' own ``ROPE_INIT_FUNCTIONS`` and against the formulas written here, the rotation against
``apply_rotary_pos_emb`` and against pair-wise rotation, partial rotation, the relative-position property, the tables
computed once and extended, and the config's checks of the rope_* fields."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half

from transformer.lm import LMConfig, build_lm
from transformer.lm.rotary import RotaryEmbedding, inverse_frequencies
from transformer.lm.rotary import rotate_half as our_rotate_half

BASE = dict(vocab=11, n_layers=1, d_model=32, d_ff=16, n_heads=2, dropout=0.0, attention_dropout=0.0)


def _hf(rope_type: str, fraction: float = 1.0, **params) -> LlamaConfig:
    rope = {"rope_type": rope_type, "rope_theta": 500000.0, "partial_rotary_factor": fraction, **params}
    return LlamaConfig(hidden_size=32, num_attention_heads=2, max_position_embeddings=4096, rope_parameters=rope)


RULES = {
    "linear": ({"factor": 4.0}, {"factor": 4.0}),
    "llama3": (
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_len": 64},
    ),
    "yarn": (
        {"factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 64},
        {"factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_len": 64, "attention_factor": None},
    ),
}


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_inverse_frequencies_and_attention_factor_equal_transformers(rule, fraction):
    theirs, ours = RULES[rule]
    expected, expected_factor = ROPE_INIT_FUNCTIONS[rule](_hf(rule, fraction, **theirs))
    got, factor = inverse_frequencies(int(16 * fraction), 500000.0, rule, **ours)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert factor == pytest.approx(expected_factor, abs=1e-15)
    plain, _ = inverse_frequencies(int(16 * fraction), 500000.0)
    assert (got - plain).abs().max() > 0  # the rule changes something on this data


def test_the_unscaled_frequencies_are_roformers_formula_and_llamas():
    got, factor = inverse_frequencies(16, 10000.0)
    i = torch.arange(8, dtype=torch.float64)
    torch.testing.assert_close(got.double(), 10000.0 ** (-2 * i / 16), rtol=1e-6, atol=0)
    hf = LlamaConfig(hidden_size=32, num_attention_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    expected, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(hf)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert factor == 1.0


def test_llama3_and_yarn_follow_their_formulas_written_here():
    inv = 1.0 / 500000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    factor, low, high, original = 8.0, 1.0, 4.0, 64
    wavelen = 2 * math.pi / inv
    ratio = original / wavelen
    smooth = ((ratio - low) / (high - low)).clamp(0, 1)
    expected = torch.where(wavelen < original / high, inv, torch.where(wavelen > original / low, inv / factor, 0.0))
    middle = (wavelen >= original / high) & (wavelen <= original / low)
    expected = torch.where(middle, (1 - smooth) * inv / factor + smooth * inv, expected)
    got, _ = inverse_frequencies(16, 500000.0, "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_len=64)  # fmt: skip
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)
    assert bool(middle.any()) and bool((wavelen > original / low).any()) and bool((wavelen < original / high).any())
    # yarn: dims turning more than beta_fast times over the original context kept, fewer than beta_slow divided
    got, attention = inverse_frequencies(16, 500000.0, "yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                         original_max_len=64, attention_factor=None)  # fmt: skip
    turns = original * inv / (2 * math.pi)
    torch.testing.assert_close(got.double()[turns > 32], inv[turns > 32], rtol=1e-6, atol=0)
    torch.testing.assert_close(got.double()[turns < 1], inv[turns < 1] / 4.0, rtol=1e-6, atol=0)
    assert attention == pytest.approx(0.1 * math.log(4.0) + 1.0)
    _, given = inverse_frequencies(16, 500000.0, "yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                                   original_max_len=64, attention_factor=0.7)  # fmt: skip
    assert given == 0.7


def test_rotation_equals_transformers_and_the_pairwise_rotation():
    torch.manual_seed(0)
    rotary = RotaryEmbedding(8, 10000.0, max_len=32)
    positions = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])  # the second row left-padded
    rotation = rotary(positions, torch.float64)
    q, k = torch.randn(2, 3, 5, 8, dtype=torch.float64), torch.randn(2, 1, 5, 8, dtype=torch.float64)
    cos, sin = rotation.cos.squeeze(1), rotation.sin.squeeze(1)
    expected_q, expected_k = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(rotation(q), expected_q, rtol=0, atol=0)
    torch.testing.assert_close(rotation(k), expected_k, rtol=0, atol=0)
    x = torch.randn(4, 8)
    torch.testing.assert_close(our_rotate_half(x), rotate_half(x))
    # pair (i, i + 4) of position m turned by the angle m * theta_i
    theta = 10000.0 ** (-torch.arange(4, dtype=torch.float64) / 4)
    angle = positions[..., None].double() * theta
    a, b = q[..., :4], q[..., 4:]
    c, s = torch.cos(angle)[:, None], torch.sin(angle)[:, None]
    torch.testing.assert_close(rotation(q), torch.cat([a * c - b * s, b * c + a * s], -1), rtol=1e-6, atol=1e-6)


def test_partial_rotation_turns_the_first_dims_and_passes_the_rest():
    torch.manual_seed(1)
    rotary = RotaryEmbedding(4, 10000.0, max_len=16)
    rotation = rotary(torch.arange(6)[None], torch.float32)
    q = torch.randn(1, 2, 6, 8)
    out = rotation(q)
    torch.testing.assert_close(out[..., 4:], q[..., 4:], rtol=0, atol=0)
    full = RotaryEmbedding(4, 10000.0, max_len=16)(torch.arange(6)[None], torch.float32)
    torch.testing.assert_close(out[..., :4], full(q[..., :4]), rtol=0, atol=0)
    assert (out[..., 1:, :4] - q[..., 1:, :4]).abs().max() > 1e-3


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 40), n=st.integers(0, 40), shift=st.integers(0, 20), seed=st.integers(0, 2**16))
def test_scores_depend_on_the_distance_only(m, n, shift, seed):
    """RoFormer's property (section 3.4.2): <R_m q, R_n k> = <q, R_(n-m) k>, so shifting both positions changes
    nothing (to float32 tables' rounding)."""
    generator = torch.Generator().manual_seed(seed)
    rotary = RotaryEmbedding(8, 10000.0, max_len=64)
    q, k = (torch.randn(1, 1, 1, 8, dtype=torch.float64, generator=generator) for _ in range(2))

    def score(a, b):
        return float(rotary(torch.tensor([[a]]), torch.float64)(q) @ rotary(torch.tensor([[b]]), torch.float64)(k).mT)

    assert score(m + shift, n + shift) == pytest.approx(score(m, n), abs=1e-4)


def test_scores_change_with_the_distance():
    torch.manual_seed(2)
    rotary = RotaryEmbedding(8, 10000.0, max_len=64)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    turned = [float(rotary(torch.tensor([[7]]), torch.float64)(q) @ rotary(torch.tensor([[n]]), torch.float64)(k).mT)
              for n in (3, 4)]  # fmt: skip
    assert abs(turned[0] - turned[1]) > 1e-3


def test_the_tables_are_computed_once_and_extended_past_max_len():
    rotary = RotaryEmbedding(8, 10000.0, max_len=16)
    cos, _ = rotary.tables(5)
    assert cos.shape == (16, 8) and cos.dtype == torch.float32
    assert rotary.tables(16)[0] is cos  # kept
    longer, _ = rotary.tables(40)
    assert longer.shape == (40, 8)
    torch.testing.assert_close(longer[:16], cos, rtol=0, atol=0)
    yarn = RotaryEmbedding(8, 10000.0, max_len=16, scaling="yarn", factor=4.0, beta_fast=32.0, beta_slow=1.0,
                           original_max_len=8, attention_factor=None)  # fmt: skip
    assert float(yarn.tables(1)[0][0, 0]) == pytest.approx(0.1 * math.log(4.0) + 1.0)  # cos(0) times the factor
    assert "inv_freq" not in rotary.state_dict()


def test_rope_fraction_one_half_leaves_half_of_each_head_unrotated_in_the_model():
    model = build_lm(LMConfig(**BASE, positional_encoding="rotary", rope_fraction=0.5))
    assert model.rotary.dim == 8 and model.layers[0].self_attn.d_k == 16
    assert not any(name.startswith("embed.1") for name in model.state_dict())


# ---------------------------------------------------------------- the config's checks
@pytest.mark.parametrize(
    "fields, message",
    [
        ({"rope_theta": 5e5}, r"rope_theta=500000.0 only applies to rotary positions.*'sinusoidal'"),
        ({"positional_encoding": "rotary", "rope_theta": 0.0}, "rope_theta must be a positive float, got rope_theta=0"),
        ({"positional_encoding": "rotary", "rope_fraction": 0.0}, r"rope_fraction must be a float in \(0, 1\]"),
        ({"positional_encoding": "rotary", "rope_fraction": 1.5}, r"rope_fraction=1.5"),
        ({"positional_encoding": "rotary", "rope_fraction": 0.1}, r"rope_fraction=0.1 rotates .* = 1 .*d_k=16"),
        ({"positional_encoding": "rotary", "rope_fraction": 0.2}, r"rope_fraction=0.2 rotates .* = 3 .* even"),
        ({"positional_encoding": "rotary", "rope_scaling": "dynamic"}, r"rope_scaling must be one of .*'dynamic'"),
        ({"positional_encoding": "rotary", "rope_scaling": "llama3", "rope_factor": 8.0},
         "rope_scaling='llama3' needs rope_original_max_len"),
        ({"positional_encoding": "rotary", "rope_scaling": "yarn"}, "rope_scaling='yarn' needs rope_original_max_len"),
        ({"positional_encoding": "rotary", "rope_factor": 2.0}, r"rope_factor=2.0 only applies to rope_scaling in"),
        ({"positional_encoding": "rotary", "rope_scaling": "linear", "rope_beta_fast": 16.0},
         r"rope_beta_fast=16.0 only applies to rope_scaling in \['yarn'\], got rope_scaling='linear'"),
        ({"positional_encoding": "rotary", "rope_scaling": "linear", "rope_original_max_len": 64},
         "rope_original_max_len=64 only applies"),
        ({"positional_encoding": "rotary", "rope_scaling": "llama3", "rope_original_max_len": 64,
          "rope_high_freq_factor": 1.0}, "rope_high_freq_factor=1.0 must be above rope_low_freq_factor=1.0"),
        ({"positional_encoding": "rotary", "rope_scaling": "yarn", "rope_original_max_len": 0},
         "rope_original_max_len must be a positive int or None, got rope_original_max_len=0"),
        ({"positional_encoding": "rotary", "rope_scaling": "yarn", "rope_original_max_len": 8,
          "rope_attention_factor": -1.0}, "rope_attention_factor must be a positive float or None"),
        ({"positional_encoding": "rotary", "positional_scale": 2.0}, "positional_scale=2.0 scales a table"),
        ({"positional_encoding": "none", "positional_scale": 2.0}, "positional_scale=2.0 scales positions"),
        ({"positional_encoding": "rotary", "positional_init": "zeros"}, "positional_init='zeros' needs"),
        ({"positional_encoding": "spiral"}, r"positional_encoding must be one of .*'rotary', 'none'; got 'spiral'"),
    ],
)  # fmt: skip
def test_the_config_refuses_bad_rope_fields_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        LMConfig(**BASE, **fields)


def test_scaled_configs_build_and_differ_from_the_unscaled_model():
    torch.manual_seed(3)
    plain = LMConfig(**BASE, positional_encoding="rotary", max_len=64)
    tokens = torch.randint(0, 11, (1, 40))
    model = build_lm(plain).eval()
    state = model.state_dict()
    out = model(tokens)
    for fields in (
        {"rope_scaling": "linear", "rope_factor": 2.0},
        {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_original_max_len": 16},
        {"rope_scaling": "yarn", "rope_factor": 4.0, "rope_original_max_len": 16},
    ):
        scaled = build_lm(plain.replace(**fields)).eval()
        scaled.load_state_dict(state)
        assert (scaled(tokens) - out).abs().max() > 1e-4, fields


def test_a_rotary_model_built_on_the_meta_device_computes_its_frequencies_again():
    config = LMConfig(**BASE, positional_encoding="rotary", rope_scaling="llama3", rope_factor=8.0,
                      rope_original_max_len=4, max_len=16)  # fmt: skip
    torch.manual_seed(4)
    reference = build_lm(config).eval()
    with torch.device("meta"):
        model = build_lm(config)
    model = model.to_empty(device="cpu").eval()
    with torch.no_grad():
        model.rotary.inv_freq.fill_(float("nan"))  # what to_empty may leave: any bits
    model.load_state_dict(reference.state_dict())
    model.rotary.reset_buffers()
    torch.testing.assert_close(model.rotary.inv_freq, reference.rotary.inv_freq, rtol=0, atol=0)
    tokens = torch.randint(0, 11, (2, 9))
    torch.testing.assert_close(model(tokens), reference(tokens), rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(3))
def test_scaled_frequencies_equal_transformers_over_a_seeded_sweep_of_parameters(seed):
    """llama3 and yarn over generated parameters (head widths, bases, factors, betas, original contexts) against
    transformers' ROPE_INIT_FUNCTIONS: the boundaries of the correction range and of the smoothing band land between
    dimensions here (which the fixed parameters above do not show: yarn's low end floored, its high end ceiled)."""
    rng = random.Random(seed)
    fractional_low = 0
    for _ in range(12):
        dim = rng.choice([16, 32, 64, 128])
        theta = rng.choice([10000.0, 500000.0, 1e6])
        original = rng.choice([256, 2048, 4096, 8192])
        factor = rng.choice([2.0, 4.0, 8.0, 16.0])
        beta_fast, beta_slow = rng.choice([32.0, 16.0, 24.0]), rng.choice([1.0, 2.0])
        params = {"factor": factor, "beta_fast": beta_fast, "beta_slow": beta_slow}
        hf = LlamaConfig(
            hidden_size=dim * 2,
            num_attention_heads=2,
            max_position_embeddings=original * int(factor),
            rope_parameters={"rope_type": "yarn", "rope_theta": theta, "original_max_position_embeddings": original,
                             **params},
        )  # fmt: skip
        expected, expected_factor = ROPE_INIT_FUNCTIONS["yarn"](hf)
        got, got_factor = inverse_frequencies(dim, theta, "yarn", original_max_len=original, attention_factor=None,
                                              **params)  # fmt: skip
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert got_factor == pytest.approx(expected_factor, abs=1e-15)
        low = dim * math.log(original / (beta_fast * 2 * math.pi)) / (2 * math.log(theta))
        fractional_low += low > 0 and low != math.floor(low)
        low_freq, high_freq = rng.choice([(1.0, 4.0), (2.0, 8.0), (1.0, 2.0)])
        l3 = {"factor": factor, "low_freq_factor": low_freq, "high_freq_factor": high_freq}
        hf = LlamaConfig(
            hidden_size=dim * 2,
            num_attention_heads=2,
            rope_parameters={"rope_type": "llama3", "rope_theta": theta, "original_max_position_embeddings": original,
                             **l3},
        )  # fmt: skip
        expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf)
        got, _ = inverse_frequencies(dim, theta, "llama3", original_max_len=original, **l3)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert fractional_low  # the floor at yarn's low end decides something on this data
