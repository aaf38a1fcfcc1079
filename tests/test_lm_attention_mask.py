"""Hugging Face's ``attention_mask`` (batch, steps) of 1 = a real token and 0 = a pad, int64 or bool, as
transformers' ``generate`` takes it: the same tokens on a left-padded batch, and refusals that say what to pass."""

from __future__ import annotations

import pytest
import torch
from pretrained_helpers import hf_model, left_padded_batch

from transformer.lm import TransformerLM, beam_generate, generate

transformers = pytest.importorskip("transformers")

NEW = 8


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    theirs = hf_model(transformers, "llama", seed=5)
    theirs.save_pretrained(folder)
    return theirs, TransformerLM.from_pretrained(folder)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool])
def test_a_left_padded_batch_generates_transformers_tokens(models, dtype):
    theirs, ours = models
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = theirs.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=NEW, pad_token_id=0,
        eos_token_id=None, min_new_tokens=0,
    )  # fmt: skip
    got = generate(ours, tokens, NEW, attention_mask=mask.to(dtype), pad_symbol=0)
    assert torch.equal(got, expected)
    unmasked = generate(ours, tokens, NEW, pad_symbol=0)  # the pads read as tokens: other continuations
    assert not torch.equal(unmasked[1:], expected[1:])
    assert torch.equal(generate(ours, tokens, NEW, prompt_mask=mask, pad_symbol=0), got)


def test_beam_search_takes_it_too(models):
    _, ours = models
    tokens, mask = left_padded_batch(rows=2, steps=7, pads=(0, 3))
    one = tokens[1:], mask[1:]
    got, score = beam_generate(ours, one[0], 4, attention_mask=one[1].long())
    expected, expected_score = beam_generate(ours, one[0], 4, prompt_mask=one[1])
    assert torch.equal(got, expected) and score == expected_score
    assert beam_generate(ours, one[0], 4)[1] != expected_score  # the pads read as tokens score otherwise


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (lambda m: m[:, 1:], r"attention_mask must have the prompt's shape \(batch, steps\) = \(3, 7\), got \(3, 6\)"),
        (lambda m: m.long() * 2, r"attention_mask must hold only 0 \(a pad\) and 1 \(a real token\), got \[2\]"),
        (lambda m: m.float(), r"attention_mask must be an integer or bool tensor of 0/1, got torch.float32"),
        (
            lambda m: m.flip(1).long(),
            r"attention_mask must pad on the left .*'left'.*got a 1 followed by a 0 in row 1 at column 4",
        ),
    ],
)
def test_a_wrong_mask_is_refused_naming_the_argument_expected_and_actual(models, mask, message):
    _, ours = models
    tokens, real = left_padded_batch(steps=7, pads=(0, 2, 4))
    with pytest.raises(ValueError, match=message):
        generate(ours, tokens, NEW, attention_mask=mask(real))


def test_both_masks_are_refused(models):
    _, ours = models
    tokens, real = left_padded_batch(steps=7, pads=(0, 2, 4))
    with pytest.raises(ValueError, match=r"generate: pass attention_mask \(1/0, as transformers\) or prompt_mask"):
        generate(ours, tokens, NEW, attention_mask=real.long(), prompt_mask=real)
