"""Every argument of ``generate`` and ``beam_generate`` changes the output exactly as documented (docs/lm.md,
"Generation"; the functions' docstrings), checked by value against an independent computation: sampling against a
sampler written here from the documented rule (softmax(log_probs / temperature) cut to the top k and the top-p
nucleus, drawn by ``torch.multinomial`` from a generator seeded with ``seed``) over the full model's
log-probabilities step by step; the filler after a finished row against the documented default (``pad_symbol``, else
the config's ``pad_id``, else the end symbol)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer.lm import LMConfig, build_lm
from transformer.lm.generation import beam_generate, generate

VOCAB = 17


def _model(pad_id: int | None = 0, end: int | None = None, seed: int = 0):
    """A small float64 model; with ``end``, the end token is by far the most probable next token everywhere."""
    torch.manual_seed(seed)
    cfg = LMConfig(
        vocab=VOCAB, n_layers=1, d_model=16, d_ff=24, n_heads=2, max_len=32, dropout=0.0, attention_dropout=0.0,
        pad_id=pad_id, positional_encoding="learned",
    )  # fmt: skip
    model = build_lm(cfg).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.7)
        model.generator.proj.weight.mul_(0.2)  # a flat next-token distribution: sampling options matter
        if end is not None:
            model.generator.proj.bias[end] = 100.0
    return model


def _reference_sample(model, prompt, new, temperature=1.0, top_k=None, top_p=None, seed=0):
    """The documented sampler, step by step over the full model (no cache), one draw per row per step."""
    g = torch.Generator().manual_seed(seed)
    ys = prompt
    for _ in range(new):
        with torch.no_grad():
            log_probs = F.log_softmax(model.logits(ys)[:, -1], dim=-1)
        z = (log_probs - log_probs.amax(-1, keepdim=True)) / temperature
        if top_k is not None:
            kth = z.sort(-1, descending=True).values[:, top_k - 1 : top_k]
            z = z.masked_fill(z < kth, float("-inf"))
        if top_p is not None:
            probs = z.softmax(-1)
            keep = torch.zeros_like(probs, dtype=torch.bool)
            for row in range(probs.size(0)):  # the smallest set of most probable tokens whose mass reaches top_p
                mass = 0.0
                for token in probs[row].argsort(descending=True).tolist():
                    keep[row, token] = True
                    mass += float(probs[row, token])
                    if mass >= top_p:
                        break
            z = z.masked_fill(~keep, float("-inf"))
        token = torch.multinomial(z.softmax(-1), 1, generator=g)
        ys = torch.cat([ys, token], dim=1)
    return ys


CASES = {
    "plain": dict(),
    "temperature=0.5": dict(temperature=0.5),
    "temperature=3": dict(temperature=3.0),
    "top_k=3": dict(top_k=3),
    "top_p=0.6": dict(top_p=0.6),
    "all": dict(temperature=1.7, top_k=5, top_p=0.8),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("use_cache", [True, False])
def test_sampling_draws_what_the_documented_sampler_draws(name, use_cache):
    model = _model()
    prompt = torch.randint(0, VOCAB, (3, 4), generator=torch.Generator().manual_seed(1))
    options = CASES[name]
    expected = _reference_sample(model, prompt, 12, seed=5, **options)
    got = generate(model, prompt, 12, sample=True, seed=5, use_cache=use_cache, **options)
    assert torch.equal(got, expected)
    given = generate(model, prompt, 12, sample=True, seed=torch.Generator().manual_seed(5), **options)
    assert torch.equal(given, expected)  # a generator seeded with 5 is seed=5
    if options:  # the options matter on this data: without them the draws differ
        assert not torch.equal(expected, _reference_sample(model, prompt, 12, seed=5))
    assert not torch.equal(expected, _reference_sample(model, prompt, 12, seed=6, **options))


def test_greedy_is_the_full_models_argmax_and_top_k_1_is_greedy():
    model = _model()
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(2))
    ys = prompt
    for _ in range(10):
        ys = torch.cat([ys, model.logits(ys)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generate(model, prompt, 10), ys)
    assert torch.equal(generate(model, prompt, 10, sample=True, top_k=1, seed=3), ys)


@pytest.mark.parametrize("pad_id, pad_symbol, expected", [(5, None, 5), (5, 7, 7), (None, None, 3), (None, 7, 7)])
def test_a_finished_row_is_padded_with_the_documented_filler(pad_id, pad_symbol, expected):
    """After the end token (3): ``pad_symbol``, else the config's ``pad_id``, else the end symbol; the same for
    greedy, sampled and beam search, and for the end tokens of ``end_symbols``."""
    end = 3
    model = _model(pad_id=pad_id, end=end)
    prompt = torch.tensor([[1, 2, 4], [6, 8, 9]])
    outputs = [
        generate(model, prompt, 6, end_symbol=end, pad_symbol=pad_symbol),
        generate(model, prompt, 6, end_symbol=end, pad_symbol=pad_symbol, sample=True, seed=0),
        beam_generate(model, prompt[:1], 6, beam_size=3, end_symbol=end, pad_symbol=pad_symbol)[0],
    ]
    for out in outputs:
        rows = out.size(0)
        assert torch.equal(out[:, :3], prompt[:rows])
        assert torch.equal(out[:, 3], torch.full((rows,), end))
        assert torch.equal(out[:, 4:], torch.full((rows, 5), expected))
    other_end = _model(pad_id=pad_id, end=11)  # 11 is one of end_symbols: the row keeps it, then the filler
    out = generate(other_end, prompt, 6, end_symbol=end, end_symbols=[11], pad_symbol=pad_symbol)
    assert torch.equal(out[:, 3], torch.full((2,), 11)) and torch.equal(out[:, 4:], torch.full((2, 5), expected))


def test_max_new_tokens_and_the_prompt_mask_shape_the_result():
    model = _model()
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(4))
    for new in (1, 7):
        assert generate(model, prompt, new).shape == (2, 3 + new)
    padded = torch.cat([torch.zeros(1, 2, dtype=torch.long), prompt[:1]], dim=1)
    mask = torch.tensor([[False, False, True, True, True]])
    alone = generate(model, prompt[:1], 6)
    assert torch.equal(generate(model, padded, 6, prompt_mask=mask)[:, 2:], alone)


def test_seed_none_draws_from_torchs_default_generator():
    """``seed=None``: a generator seeded from torch's default one, so ``torch.manual_seed`` reproduces the draws."""
    model = _model()
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(5))
    runs = []
    for seed in (9, 9, 10):
        torch.manual_seed(seed)
        runs.append(generate(model, prompt, 15, sample=True, temperature=2.0))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
