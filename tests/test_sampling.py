"""Sampling (temperature, top-k, top-p) follows its formula and is reproducible from a seed."""

import math

import pytest
import torch
from torch import nn

import transformer as T
from transformer.lm.config import LMConfig
from transformer.lm.generation import generate

P = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])  # the next-token distribution of the stub model, every step


class _FixedModel(nn.Module):
    """A stand-in model whose next-token distribution is always ``probs`` (default P): the law, without a network."""

    def __init__(self, probs=None):
        super().__init__()
        self.probs = P if probs is None else probs
        vocab = self.probs.numel()
        self.config = T.TransformerConfig(
            src_vocab=vocab, tgt_vocab=vocab, d_model=8, n_heads=2, d_ff=8, max_len=50, pad_id=None
        )
        self.steps_taken = 0

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 8)

    def next_tokens(self, memory, src_mask, *, use_cache=True):
        model = self

        class Steps:
            def __call__(self, ys):
                model.steps_taken += 1
                return model.probs.log().expand(ys.size(0), -1)

            def reorder(self, index):
                pass

        return Steps()


def _first_tokens(n=40000, probs=None, **options):
    model = _FixedModel(probs)
    out = T.sample_decode(model, torch.ones(n, 1, dtype=torch.long), None, 2, 0, seed=123, **options)
    return torch.bincount(out[:, 1], minlength=model.probs.numel()).double() / n


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


@pytest.mark.parametrize(
    "options, message",
    [
        ({"temperature": 0.0}, "sample_decode: temperature must be a positive finite number, got 0.0"),
        ({"top_k": 0}, "sample_decode: top_k must be a positive int or None, got 0"),
        ({"top_p": 1.5}, r"sample_decode: top_p must be a number in \(0, 1\] or None, got 1.5"),
        ({"seed": "x"}, "seed"),  # the contract names it; with checks off, the ValueError does
    ],
)
@pytest.mark.parametrize("checks_on", [True, False])
def test_bad_sampling_options_are_refused(options, message, checks_on):
    with T.checks(checks_on), pytest.raises((ValueError, T.TypeCheckError), match=message):
        T.sample_decode(_FixedModel(), torch.ones(2, 1, dtype=torch.long), None, 3, 0, **options)


def test_seed_none_draws_from_torchs_default_generator_so_manual_seed_reproduces_a_run():
    """seed=None (the default): the draws are seeded from torch's default generator, so ``torch.manual_seed``
    reproduces a sampled run (both searches) and two runs without a new manual_seed differ."""
    model = _FixedModel()
    src = torch.ones(64, 1, dtype=torch.long)
    torch.manual_seed(5)
    a = T.sample_decode(model, src, None, 6, 0)
    b = T.sample_decode(model, src, None, 6, 0)
    torch.manual_seed(5)
    assert torch.equal(a, T.sample_decode(model, src, None, 6, 0)) and not torch.equal(a, b)
    lm = T.build_lm(LMConfig(vocab=17, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=16)).eval()
    prompt = torch.ones(8, 1, dtype=torch.long)
    torch.manual_seed(5)
    first = generate(lm, prompt, 6, sample=True)
    torch.manual_seed(5)
    assert torch.equal(first, generate(lm, prompt, 6, sample=True))
    assert not torch.equal(first, generate(lm, prompt, 6, sample=True))


def test_with_a_real_model_top_k_1_is_greedy_and_the_cache_changes_nothing():
    torch.manual_seed(0)
    model = T.make_model(11, 13, N=2, d_model=32, d_ff=64, h=4, dropout=0.0).eval()
    src = torch.randint(1, 11, (4, 6))
    mask = T.AttentionMask.padding(src, 0)
    assert torch.equal(
        T.sample_decode(model, src, mask, 12, 1, top_k=1, seed=3), T.greedy_decode(model, src, mask, 12, 1)
    )
    a = T.sample_decode(model, src, mask, 12, 1, temperature=1.5, top_p=0.9, seed=3)
    assert torch.equal(a, T.sample_decode(model, src, mask, 12, 1, temperature=1.5, top_p=0.9, seed=3, use_cache=False))
    assert not math.isnan(float(a.float().mean()))


# Probabilities that are exact in binary, in an order that is not sorted (so a nucleus or a top-k read in vocabulary
# order, or scattered back to the wrong tokens, shows): sorted, they are tokens 1, 3, 0, then 2 and 4 tied.
Q = torch.tensor([0.125, 0.5, 0.0625, 0.25, 0.0625])


def _support(freq):
    return {i for i, f in enumerate(freq.tolist()) if f > 0}


@pytest.mark.parametrize(
    "top_p, kept",
    [(0.5, {1}), (0.75, {1, 3}), (0.875, {1, 3, 0}), (0.876, None), (0.7499, {1, 3}), (0.75 + 5e-7, {1, 3})],
)
def test_top_p_exactly_at_a_cumulative_boundary_keeps_the_prefix_that_reaches_it(top_p, kept):
    """0.75 = 0.5 + 0.25 exactly: the nucleus is {1, 3}, not {1, 3, 0}, whichever way float32 rounding of the
    log-probabilities goes (a mass short of top_p by less than TOP_P_SLACK = 1e-6 reaches it); above 0.875 the
    prefix needs one of the tied tokens 2 and 4 (which one is the sort's choice)."""
    freq = _first_tokens(4000, Q, top_p=top_p)
    if kept is None:
        assert {0, 1, 3} <= _support(freq) and len(_support(freq)) == 4
        return
    assert _support(freq) == kept
    expected = torch.zeros(5, dtype=torch.float64)
    expected[list(kept)] = Q.double()[list(kept)]
    _assert_frequencies(freq, expected / expected.sum(), n=4000)


@pytest.mark.parametrize(
    "top_k, kept",
    [(1, {1}), (2, {1, 3}), (3, {0, 1, 3}), (4, {0, 1, 2, 3, 4}), (5, set(range(5))), (50, set(range(5)))],
)
def test_top_k_keeps_the_k_most_probable_ties_included_and_a_k_past_the_vocabulary_keeps_all(top_k, kept):
    freq = _first_tokens(4000, Q, top_k=top_k)
    assert _support(freq) == kept  # top_k=4: the 4th is tied with the 5th, both are kept
    expected = torch.zeros(5, dtype=torch.float64)
    expected[list(kept)] = Q.double()[list(kept)]
    _assert_frequencies(freq, expected / expected.sum(), n=4000)


def test_the_temperature_is_applied_once_and_before_the_nucleus():
    """At temperature 2 the tempered probabilities are Q ** 0.5 normalised: 0.343, 0.243, 0.172, 0.121, 0.121; their
    nucleus at 0.6 is three tokens (on the raw Q it would be two), drawn as Q ** 0.5 (not Q ** 0.25, twice)."""
    freq = _first_tokens(8000, Q, temperature=2.0, top_p=0.6)
    tempered = Q.double() ** 0.5
    expected = torch.where(
        torch.tensor([True, True, False, True, False]), tempered, torch.zeros(5, dtype=torch.float64)
    )
    assert _support(freq) == {0, 1, 3}
    _assert_frequencies(freq, expected / expected.sum(), n=8000)


@pytest.mark.parametrize("temperature", [1e-45, 5e-324, 1e-300, 1e-8])
def test_a_tiny_temperature_is_greedy_decoding_and_never_overflows(temperature):
    """The limit of softmax(log p / T) as T -> 0+ is the argmax (torch's multinomial used to get inf/nan here); tokens
    tied for the best share the draw, nothing else is ever drawn."""
    freq = _first_tokens(2000, Q, temperature=temperature)
    assert freq.tolist() == [0, 1, 0, 0, 0]
    tied = torch.tensor([0.1, 0.4, 0.05, 0.4, 0.05])
    freq = _first_tokens(2000, tied, temperature=temperature)
    assert _support(freq) == {1, 3} and abs(float(freq[1]) - 0.5) < 0.06


def test_a_tiny_temperature_with_a_real_model_is_its_greedy_decoding():
    torch.manual_seed(0)
    model = T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=2, dropout=0.0).eval()
    src = torch.randint(1, 11, (3, 5))
    assert torch.equal(
        T.sample_decode(model, src, None, 8, 1, temperature=1e-45, seed=0), T.greedy_decode(model, src, None, 8, 1)
    )


class _Fixed(nn.Module):
    """A stand-in language model whose next token is always ``(last + 1) % 10`` (with certainty)."""

    config = LMConfig(vocab=10, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=50, pad_id=0)

    def next_tokens(self, *, use_cache=True):
        return _Broken(None)


class _Broken:
    """A step whose log-probabilities are NaN (a diverged model) or all -inf in row 1."""

    def __init__(self, fill):
        self.fill = fill

    def __call__(self, ys):
        if self.fill is None:  # _Fixed's step
            return torch.log(nn.functional.one_hot((ys[:, -1] + 1) % 10, 10).float() + 1e-9)
        out = Q.log().repeat(ys.size(0), 1)
        out[1] = self.fill
        return out

    def reorder(self, index):
        pass


@pytest.mark.parametrize("fill", [float("nan"), float("-inf"), float("inf")])
def test_log_probabilities_that_cannot_be_sampled_are_refused_naming_the_row(fill):
    pick = T.decoding.sampler(1.0, None, None, torch.Generator().manual_seed(0), who="sample_decode")
    with pytest.raises(
        ValueError,
        match=r"sample_decode: the next-token log-probabilities of row 1 are NaN, \+inf or "
        r"all -inf; there is nothing to sample from",
    ):
        T.decoding.search(_Broken(fill), torch.zeros(3, 1, dtype=torch.long), 3, None, 0, pick)


BAD_SAMPLING = [
    ("temperature", float("nan"), "temperature must be a positive finite number, got nan"),
    ("temperature", float("inf"), "temperature must be a positive finite number, got inf"),
    ("temperature", -0.5, "temperature must be a positive finite number, got -0.5"),
    ("temperature", True, "temperature must be a positive finite number, got True"),
    ("top_k", True, "top_k must be a positive int or None, got True"),
    ("top_k", 2.0, "top_k must be a positive int or None, got 2.0"),
    ("top_k", -1, "top_k must be a positive int or None, got -1"),
    ("top_p", float("nan"), r"top_p must be a number in \(0, 1\] or None, got nan"),
    ("top_p", 0.0, r"top_p must be a number in \(0, 1\] or None, got 0.0"),
    ("top_p", True, r"top_p must be a number in \(0, 1\] or None, got True"),
]


@pytest.mark.parametrize("name, value, message", BAD_SAMPLING, ids=[f"{n}={v}" for n, v, _ in BAD_SAMPLING])
def test_sampling_options_without_a_meaning_are_refused_naming_the_value_in_both_searches(name, value, message):
    with T.checks(False):  # the guard itself (with checks on, the signature may name a wrong type first)
        with pytest.raises(ValueError, match="sample_decode: " + message):
            T.sample_decode(_FixedModel(), torch.ones(2, 1, dtype=torch.long), None, 3, 0, **{name: value})
        with pytest.raises(ValueError, match="generate: " + message):
            generate(_Fixed(), torch.tensor([[1]]), 2, sample=True, **{name: value})
        with pytest.raises(ValueError, match="generate: " + message):  # also when not sampling
            generate(_Fixed(), torch.tensor([[1]]), 2, **{name: value})


def test_generate_refuses_sampling_options_without_sample_true():
    for options, named in (
        ({"temperature": 0.7}, "temperature=0.7"),
        ({"top_k": 3}, "top_k=3"),
        ({"top_p": 0.9, "top_k": 2}, "top_k=2, top_p=0.9"),
    ):
        with pytest.raises(ValueError, match=f"generate: {named} only applies to sampling; pass sample=True"):
            generate(_Fixed(), torch.tensor([[1]]), 2, **options)
    assert generate(_Fixed(), torch.tensor([[1]]), 2, seed=5).tolist() == [[1, 2, 3]]  # a seed alone is harmless


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_top_k_at_every_k_is_transformers_top_k_warper(temperature):
    """Every k from 1 to past the vocabulary (vocab - 1 cuts exactly the least probable token, vocab and more cut
    nothing): the distribution the sampler draws from is transformers' TemperatureLogitsWarper then TopKLogitsWarper
    on the same scores, softmaxed."""
    pytest.importorskip("transformers")
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    from transformer.decoding import sampling_probabilities

    vocab = 7
    log_probs = torch.randn(3, vocab, generator=torch.Generator().manual_seed(0), dtype=torch.float64).log_softmax(-1)
    for k in range(1, vocab + 2):
        ours = sampling_probabilities(log_probs, temperature, k, None)
        scores = TopKLogitsWarper(top_k=k)(None, TemperatureLogitsWarper(temperature)(None, log_probs.clone()))
        torch.testing.assert_close(ours, scores.softmax(-1), rtol=0, atol=1e-12)
        assert (ours > 0).sum(-1).tolist() == [min(k, vocab)] * 3, k
