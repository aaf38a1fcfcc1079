"""Attention sinks in the reference backend (docs/moe.md, "Attention sinks"): one learned logit per head in the
softmax's denominator, as transformers' gpt-oss computes it (its ``eager_attention_forward`` is the oracle: a short
seeded fuzz over shapes, masks and sinks), gradients included; bad sinks refused by name."""

from __future__ import annotations

import types

import pytest
import torch

from transformer.backends.reference import attention
from transformer.contracts import TypeCheckError


def _theirs(query, key, value, mask, sinks, scale):
    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    module = types.SimpleNamespace(num_key_value_groups=1, sinks=sinks, training=False)
    additive = (
        None
        if mask is None
        else torch.zeros(mask.shape, dtype=query.dtype).masked_fill(~mask, torch.finfo(query.dtype).min)
    )
    out, probs = eager_attention_forward(module, query, key, value, additive, scale)
    return out.transpose(1, 2), probs


def test_sinks_are_transformers_gpt_oss_attention_short_fuzz():
    pytest.importorskip("transformers")
    generator = torch.Generator().manual_seed(44)
    for case in range(20):
        batch, heads, q_len, k_len, d = 2, int(torch.randint(1, 4, (1,), generator=generator)), 5, 7, 8
        q, k, v = (
            torch.randn(batch, heads, n, d, generator=generator, dtype=torch.float64) for n in (q_len, k_len, k_len)
        )
        sinks = (torch.randn(heads, generator=generator, dtype=torch.float64) * 3).requires_grad_()
        mask = None
        if case % 2:
            mask = torch.rand(batch, 1, q_len, k_len, generator=generator) > 0.3
            mask[..., 0] = True
        q.requires_grad_()
        ours, ours_p = attention(q, k, v, mask, scale=0.4, sinks=sinks)
        theirs, theirs_p = _theirs(q, k, v, mask, sinks, 0.4)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12, msg=f"case {case}")
        torch.testing.assert_close(ours_p, theirs_p, rtol=1e-12, atol=1e-12)
        assert (ours_p.sum(-1) < 1 - 1e-6).all()  # the sink takes part of every row's mass
        grads = torch.autograd.grad(ours.sum(), (q, sinks))
        expected = torch.autograd.grad(theirs.sum(), (q, sinks))
        for a, b in zip(grads, expected, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bad_sinks_are_refused_by_name():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(
        ValueError,
        match=r"argument 'sinks' must be a float tensor of one logit per query head, shape \(2,\), got \(3,\)",
    ):
        attention(q, q, q, sinks=torch.zeros(3))
    with pytest.raises(TypeCheckError, match="sinks"):  # the contract: a float tensor
        attention(q, q, q, sinks=torch.zeros(2, dtype=torch.long))
