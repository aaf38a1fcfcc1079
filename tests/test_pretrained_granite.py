"""Granite (``GraniteForCausalLM``) checkpoint folders against transformers (issue 44): tiny random models from its
own config class (no download), with its four multipliers far from 1 (embedding, attention, residual, logits):
logits equal on a left-padded batch (float32 within 1e-5 x max|logit|, float64 within 1e-10), each multiplier
matters there, greedy generation with our cache equal token for token, gradients equal, our save_pretrained read
back by transformers to the same logits.
"""

from __future__ import annotations

import copy

import pytest
import torch
from pretrained_helpers import (
    VOCAB,
    assert_gradients_equal,
    assert_logits_close,
    hf_logits,
    left_padded_batch,
    our_greedy,
    our_logits,
    reweighted,
    their_greedy,
)

from transformer.lm import LMConfig, TransformerLM

transformers = pytest.importorskip("transformers")

MULTIPLIERS = {"embedding_multiplier": 3.0, "attention_multiplier": 0.7, "residual_multiplier": 0.4,
               "logits_scaling": 2.5}  # fmt: skip
BASE = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0}, **MULTIPLIERS,
)  # fmt: skip


def hf_granite(overrides: dict, dtype=torch.float32, seed: int = 0):
    config = transformers.GraniteConfig(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = transformers.GraniteForCausalLM._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, 0.3 if p.dim() == 1 else 0.2)
    return model.to(dtype).eval()


def _pair(tmp_path, overrides=None, dtype=torch.float32):
    theirs = hf_granite(overrides or {}, dtype)
    theirs.save_pretrained(tmp_path / "granite")
    return theirs, TransformerLM.from_pretrained(tmp_path / "granite", dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("overrides", [{}, {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}])
def test_logits_equal_transformers(tmp_path, overrides, dtype):
    theirs, ours = _pair(tmp_path, overrides, dtype)
    assert ours.pretrained_origin.architecture == "GraniteForCausalLM"
    c = ours.config
    assert (c.embedding_scale, c.attention_scale, c.residual_scale, c.logit_divisor) == (3.0, 0.7, 0.4, 2.5)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


@pytest.mark.parametrize("multiplier", list(MULTIPLIERS))
def test_each_multiplier_matters_here(tmp_path, multiplier):
    theirs, _ = _pair(tmp_path)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        other = hf_logits(hf_granite({multiplier: 1.0}), tokens, mask)
        assert (other - hf_logits(theirs, tokens, mask))[mask].abs().max() > 1e-3


def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path):
    theirs, ours = _pair(tmp_path)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, 8)
    assert torch.equal(our_greedy(ours, tokens, mask, 8), expected)


def test_gradients_of_a_loss_equal_transformers(tmp_path):
    theirs, ours = _pair(tmp_path, None, torch.float64)
    assert_gradients_equal(theirs, ours, "GraniteForCausalLM")


def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path):
    _, ours = _pair(tmp_path, None, torch.float64)
    reweighted(ours)
    folder = ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    assert type(theirs).__name__ == "GraniteForCausalLM"
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_lmconfig_refuses_multipliers_that_describe_no_model():
    base = dict(vocab=20, n_layers=1, d_model=16, d_ff=16, n_heads=2)
    with pytest.raises(ValueError, match=r"residual_scale must be a positive float, got residual_scale=0"):
        LMConfig(**base, residual_scale=0)
    with pytest.raises(ValueError, match=r"logit_divisor=2.0 with logit_softcap=3.0: one head transform"):
        LMConfig(**base, logit_divisor=2.0, logit_softcap=3.0)
    with pytest.raises(ValueError, match=r"residual_scale=0.5 .* parallel_residual=False"):
        LMConfig(**base, residual_scale=0.5, parallel_residual=True)
