"""A tokenizer's ``attention_mask`` (batch, seq) of 0s and 1s, int64 as it returns it (or bool), is a mask
``TransformerLM.forward`` and ``logits`` take as they are (issue 43): the key-padding mask it means, transformers'
logits on every real position; another shape or values other than 0/1 are refused in one sentence naming it."""

from __future__ import annotations

import pytest
import torch
from pretrained_helpers import assert_logits_close, hf_logits, hf_model, left_padded_batch

import transformer as T

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request, tmp_path_factory):
    theirs = hf_model(transformers, request.param)
    folder = tmp_path_factory.mktemp(request.param)
    theirs.save_pretrained(folder)
    return T.TransformerLM.from_pretrained(folder), theirs


def test_a_tokenizers_0_1_mask_gives_transformers_logits_positional_or_by_keyword(pair):
    ours, theirs = pair
    tokens, real = left_padded_batch(pads=(0, 3, 6))
    attention_mask = real.long()  # int64 of 0s and 1s, as a tokenizer returns it
    assert attention_mask.dtype == torch.int64 and set(attention_mask.unique().tolist()) == {0, 1}
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, real)
        for mask in (attention_mask, real, attention_mask.int()):
            got = ours.logits(tokens, mask)  # positions counted from each row's first real token, as transformers
            assert_logits_close(got, expected, real)
            assert torch.equal(got, ours.logits(tokens, T.AttentionMask(key_mask=real)))
        assert torch.equal(ours(tokens, mask=attention_mask), ours(tokens, T.AttentionMask(key_mask=real)))
        # the pads matter: without the mask the padded rows' logits differ
        assert (ours.logits(tokens) - expected)[real].abs().max() > 1e-3


def test_the_mask_goes_into_an_empty_cache_with_the_prompt(pair):
    ours, _ = pair
    tokens, real = left_padded_batch(pads=(0, 3, 6))
    with torch.no_grad():
        cache = ours.new_cache()
        cached = ours.logits(tokens, real.long(), cache=cache)
        assert torch.equal(cached, ours.logits(tokens, T.AttentionMask(key_mask=real), cache=ours.new_cache()))


def test_a_2d_mask_of_other_values_or_shape_is_refused_naming_it(pair):
    ours, _ = pair
    tokens, real = left_padded_batch()
    with pytest.raises(ValueError, match=r"must hold only 0 \(a pad\) and 1 \(a real token\), got \[2\]"):
        ours.logits(tokens, real.long() * 2)
    with pytest.raises(T.TypeCheckError, match=r"argument 'mask' is i64\[3,10\]"):
        ours.logits(tokens, real.long()[:, 1:])  # another length: the contract names it
    with pytest.raises(T.TypeCheckError, match=r"argument 'mask' is f32\[3,11\]"):
        ours.logits(tokens, real.float())
    with (
        T.checks(False),
        pytest.raises(ValueError, match=r"must have the tokens' shape \(batch, seq\) = \(3, 11\), got"),
    ):
        ours.logits(tokens, real.long()[:, 1:])  # checks off: the model's own sentence


def test_the_0_1_mask_compiles_in_one_graph(pair):
    ours, _ = pair
    tokens, real = left_padded_batch(pads=(0, 3, 6))
    compiled = torch.compile(ours.logits, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(tokens, real.long()), ours.logits(tokens, real.long()), rtol=0, atol=1e-6)
