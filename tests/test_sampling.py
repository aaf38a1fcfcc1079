"""Sampling (temperature, top-k, top-p) follows its formula and is reproducible from a seed."""

import math

import pytest
import torch
from torch import nn

import transformer as T

P = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])  # the next-token distribution of the stub model, every step


class _FixedModel(nn.Module):
    """A stand-in model whose next-token distribution is always P (vocabulary 5): the law, without a network."""

    def __init__(self):
        super().__init__()
        self.config = T.TransformerConfig(src_vocab=5, tgt_vocab=5, d_model=8, n_heads=2, d_ff=8, max_len=50, pad_id=None)
        self.steps_taken = 0

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 8)

    def next_tokens(self, memory, src_mask, *, use_cache=True):
        model = self

        class Steps:
            def __call__(self, ys):
                model.steps_taken += 1
                return P.log().expand(ys.size(0), -1)

            def reorder(self, index):
                pass

        return Steps()


def _first_tokens(n=40000, **options):
    model = _FixedModel()
    out = T.sample_decode(model, torch.ones(n, 1, dtype=torch.long), None, 2, 0, seed=123, **options)
    return torch.bincount(out[:, 1], minlength=5).double() / n


def _assert_frequencies(freq, expected, n=40000):
    sigma = (expected * (1 - expected) / n).sqrt()
    assert ((freq - expected).abs() <= 5 * sigma + 1e-12).all(), (freq, expected)


def test_plain_sampling_draws_from_the_distribution():
    _assert_frequencies(_first_tokens(), P.double())


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_sharpens_or_flattens_as_p_to_the_1_over_t(temperature):
    expected = P.double() ** (1 / temperature)
    _assert_frequencies(_first_tokens(temperature=temperature), expected / expected.sum())


def test_top_k_keeps_the_k_most_probable_renormalised():
    freq = _first_tokens(top_k=2)
    assert freq[2:].sum() == 0
    _assert_frequencies(freq, torch.tensor([0.5, 0.2, 0, 0, 0], dtype=torch.float64) / 0.7)


@pytest.mark.parametrize("top_p, kept", [(0.65, 2), (0.5, 1), (0.9, 4), (1.0, 5)])
def test_top_p_keeps_the_smallest_prefix_whose_mass_reaches_p(top_p, kept):
    freq = _first_tokens(top_p=top_p)
    expected = P.double().clone()
    expected[kept:] = 0
    assert freq[kept:].sum() == 0
    _assert_frequencies(freq, expected / expected.sum())


def test_top_k_and_top_p_together_and_with_temperature():
    expected = P.double()[:3] ** 2  # temperature 0.5, then the top 3, then the nucleus of 0.95 keeps all 3
    expected = torch.cat([expected / expected.sum(), torch.zeros(2, dtype=torch.float64)])
    _assert_frequencies(_first_tokens(temperature=0.5, top_k=3, top_p=0.95), expected)


def test_a_seed_reproduces_the_sample_and_another_seed_does_not():
    model = _FixedModel()
    src = torch.ones(64, 1, dtype=torch.long)
    a = T.sample_decode(model, src, None, 6, 0, seed=7)
    assert torch.equal(a, T.sample_decode(model, src, None, 6, 0, seed=7))
    assert not torch.equal(a, T.sample_decode(model, src, None, 6, 0, seed=8))
    g = torch.Generator().manual_seed(7)
    assert torch.equal(a, T.sample_decode(model, src, None, 6, 0, seed=g))


def test_sampling_stops_and_pads_after_the_end_symbol():
    model = _FixedModel()
    out = T.sample_decode(model, torch.ones(200, 1, dtype=torch.long), None, 12, 0, end_symbol=0, pad_symbol=4, seed=1)
    assert out.shape == (200, 12)
    ended = 0
    for row in out.tolist():
        if 0 in row[1:]:
            cut = row.index(0, 1)
            assert row[cut + 1 :] == [4] * (11 - cut)
            ended += 1
    assert ended > 150  # P(end) = 0.5 per step: nearly every row ends within 11 steps


@pytest.mark.parametrize("options, message", [
    ({"temperature": 0.0}, "sample_decode: temperature must be a positive finite number, got 0.0"),
    ({"top_k": 0}, "sample_decode: top_k must be a positive int or None, got 0"),
    ({"top_p": 1.5}, r"sample_decode: top_p must be a number in \(0, 1\] or None, got 1.5"),
    ({"seed": "x"}, "seed"),  # the contract names it; with checks off, the ValueError does
])
@pytest.mark.parametrize("checks_on", [True, False])
def test_bad_sampling_options_are_refused(options, message, checks_on):
    with T.checks(checks_on), pytest.raises((ValueError, T.TypeCheckError), match=message):
        T.sample_decode(_FixedModel(), torch.ones(2, 1, dtype=torch.long), None, 3, 0, **options)


def test_with_a_real_model_top_k_1_is_greedy_and_the_cache_changes_nothing():
    torch.manual_seed(0)
    model = T.make_model(11, 13, N=2, d_model=32, d_ff=64, h=4, dropout=0.0).eval()
    src = torch.randint(1, 11, (4, 6))
    mask = T.AttentionMask.padding(src, 0)
    assert torch.equal(T.sample_decode(model, src, mask, 12, 1, top_k=1, seed=3), T.greedy_decode(model, src, mask, 12, 1))
    a = T.sample_decode(model, src, mask, 12, 1, temperature=1.5, top_p=0.9, seed=3)
    assert torch.equal(a, T.sample_decode(model, src, mask, 12, 1, temperature=1.5, top_p=0.9, seed=3, use_cache=False))
    assert not math.isnan(float(a.float().mean()))
