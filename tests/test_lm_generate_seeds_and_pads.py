"""Promises of generation on boundary data: seeds (the same seed the same tokens, another seed others, a generator
passed in continues its stream across calls, an int seed leaves torch's default generator alone, a seed that is not
one is refused naming the function and the argument), the pad symbol of left-padded batches (the prompt's columns
come back as given, a pad id that the model also generates ends nothing, only the mask says which prompt tokens are
pads), explicit positions together with the key/value cache, and head counts that are not a power of two.
"""

from __future__ import annotations

import pytest
import torch

from transformer.decoding import seeded_generator
from transformer.lm import LMConfig, build_lm, generate
from transformer.masks import AttentionMask

VOCAB = 37


def _model(**overrides):
    torch.manual_seed(0)
    fields = dict(
        vocab=VOCAB, n_layers=2, d_model=24, d_ff=32, n_heads=3, n_kv_heads=1, max_len=48, dropout=0.0,
        attention_dropout=0.0, positional_encoding="rotary", norm="rms",
    )  # fmt: skip
    return build_lm(LMConfig(**{**fields, **overrides})).eval()


def _prompt(rows=4, steps=5, seed=1):
    return torch.randint(3, VOCAB, (rows, steps), generator=torch.Generator().manual_seed(seed))


def test_a_generator_passed_in_continues_its_stream_across_calls():
    model, prompt = _model(), _prompt()
    stream = torch.Generator().manual_seed(3)
    first = generate(model, prompt, 12, sample=True, seed=stream)
    second = generate(model, prompt, 12, sample=True, seed=stream)
    assert not torch.equal(first, second)  # the second call draws the stream's next numbers
    again = torch.Generator().manual_seed(3)
    assert torch.equal(generate(model, prompt, 12, sample=True, seed=again), first)
    assert torch.equal(generate(model, prompt, 12, sample=True, seed=again), second)
    assert torch.equal(generate(model, prompt, 12, sample=True, seed=3), first)  # an int: a fresh stream each call


def test_an_int_seed_leaves_torchs_default_generator_alone():
    model, prompt = _model(), _prompt()
    torch.manual_seed(11)
    state = torch.get_rng_state()
    a = generate(model, prompt, 10, sample=True, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(12)  # another default seed: the same tokens
    assert torch.equal(generate(model, prompt, 10, sample=True, seed=5), a)
    assert not torch.equal(generate(model, prompt, 10, sample=True, seed=6), a)


@pytest.mark.parametrize("use_cache", [True, False])
def test_the_same_seed_gives_the_same_tokens_on_a_left_padded_batch_with_or_without_the_cache(use_cache):
    model, prompt = _model(), _prompt()
    mask = torch.ones_like(prompt, dtype=torch.bool)
    mask[1, :2] = mask[3, :4] = False
    padded = prompt.masked_fill(~mask, 0)
    reference = generate(model, padded, 9, sample=True, seed=4, prompt_mask=mask)
    got = generate(model, padded, 9, sample=True, seed=4, prompt_mask=mask, use_cache=use_cache)
    assert torch.equal(got, reference)
    assert torch.equal(got[:, :5], padded)  # the prompt's columns, pads included, come back as given


@pytest.mark.parametrize("bad", [True, 1.5, 2**64, -(2**63) - 1, "7"])
def test_a_seed_that_is_not_one_is_refused_naming_the_function_and_the_argument(bad):
    model, prompt = _model(), _prompt(rows=1)
    with pytest.raises((ValueError, TypeError), match=r"generate: argument 'seed'"):
        generate(model, prompt, 3, sample=True, seed=bad)


def test_the_seed_range_is_what_torch_takes():
    model, prompt = _model(), _prompt(rows=2)
    for seed in (-(2**63), 2**64 - 1, 0):
        expected = generate(model, prompt, 4, sample=True, seed=torch.Generator().manual_seed(seed))
        assert torch.equal(generate(model, prompt, 4, sample=True, seed=seed), expected)


def test_seeded_generator_names_its_caller_for_a_bad_seed():
    with pytest.raises(ValueError, match=r"sample_decode: argument 'seed' must be an int .* got True"):
        seeded_generator(True, "sample_decode")
    stream = torch.Generator()
    assert seeded_generator(stream) is stream


def test_a_pad_id_the_model_generates_ends_nothing_and_only_the_mask_marks_prompt_pads():
    """The pad symbol is the id greedy decoding generates first in row 0: the rows still run to their length (no
    end symbol), and a left-padded row whose pads are that id generates what it generates alone."""
    model, prompt = _model(), _prompt(rows=2)
    alone = generate(model, prompt, 8)
    pad = int(alone[0, 5])
    got = generate(model, prompt, 8, pad_symbol=pad)
    assert torch.equal(got, alone)
    padded = torch.cat([torch.full((2, 3), pad), prompt], dim=1)
    mask = torch.cat([torch.zeros(2, 3, dtype=torch.bool), torch.ones_like(prompt, dtype=torch.bool)], dim=1)
    mask[1, :3] = True  # row 1's leading "pads" are real tokens: the mask, not the id, says so
    out = generate(model, padded, 8, pad_symbol=pad, prompt_mask=mask)
    assert torch.equal(out[0, 3:], alone[0])
    assert torch.equal(out[1], generate(model, padded[1:], 8)[0])


@pytest.mark.parametrize("scheme", ["rotary", "learned"])
def test_explicit_positions_with_a_cache_give_the_full_forward_with_those_positions(scheme):
    """Positions with gaps (not a shift, which RoPE could not tell apart), given chunk by chunk to a cache: each
    chunk's logits are the full forward's with those positions; a step without positions after them continues from
    the last one given + 1 (a left-padded prompt's pads included)."""
    model = _model(positional_encoding=scheme, n_kv_heads=3 if scheme == "learned" else 1)
    tokens = _prompt(rows=2, steps=5)
    positions = torch.tensor([[0, 4, 5, 9, 10], [0, 1, 7, 8, 20]])
    full = model.logits(tokens, positions=positions)
    cache = model.new_cache()
    chunks = [(0, 2), (2, 3), (3, 4), (4, 5)]  # a prompt, then one position at a time
    for start, stop in chunks:
        chunk = model.logits(tokens[:, start:stop], cache=cache, positions=positions[:, start:stop])
        torch.testing.assert_close(chunk, full[:, start:stop], atol=2e-6, rtol=0)
    mask = torch.tensor([[False, True, True, True, True], [True] * 5])
    continued = positions.clone()
    continued[:, 4] = positions[:, 3] + 1
    cache = model.new_cache()
    model.logits(tokens[:, :4], AttentionMask(key_mask=mask[:, :4]), cache=cache, positions=positions[:, :4])
    step = model.logits(tokens[:, 4:], cache=cache)
    expected = model.logits(tokens, AttentionMask(key_mask=mask), positions=continued)[:, 4:]
    torch.testing.assert_close(step, expected, atol=2e-6, rtol=0)
    shifted = model.logits(tokens, AttentionMask(key_mask=mask), positions=positions)[:, 4:]
    assert (shifted - expected).abs().max() > 1e-3  # the data makes the continued position matter


@pytest.mark.parametrize("heads, kv_heads", [(3, 1), (3, 3), (6, 3), (6, 2), (5, 1)])
def test_head_counts_that_are_not_powers_of_two_generate_the_full_models_greedy_tokens(heads, kv_heads):
    model = _model(n_heads=heads, n_kv_heads=kv_heads, d_model=heads * 6)
    prompt = _prompt(rows=3)
    mask = torch.ones_like(prompt, dtype=torch.bool)
    mask[2, :3] = False
    out = generate(model, prompt, 6, prompt_mask=mask)
    nocache = generate(model, prompt, 6, prompt_mask=mask, use_cache=False)
    assert torch.equal(out, nocache)
    ys = prompt
    for _ in range(6):  # the full model's argmax at every step, pads hidden, positions from each first real token
        real = torch.cat([mask, torch.ones(3, ys.size(1) - 5, dtype=torch.bool)], dim=1)
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
        logits = model.logits(ys, AttentionMask(key_mask=real), positions=positions)[:, -1]
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ys)
