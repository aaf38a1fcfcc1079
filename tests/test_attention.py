"""The attention reference and its backends (how a backend is chosen: tests/test_backends.py)."""

import pytest
import torch

import transformer as T


def _qkv(b=2, h=3, lq=5, lk=7, d=8, dtype=torch.float32):
    return (
        torch.randn(b, h, lq, d, dtype=dtype),
        torch.randn(b, h, lk, d, dtype=dtype),
        torch.randn(b, h, lk, d, dtype=dtype),
    )


def _reference(q, k, v, mask):
    """A float64 re-derivation: masked logits dropped from the softmax; empty rows give 0."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)
    return p @ v


def _mask(b=2, lq=5, lk=7):
    mask = torch.rand(b, 1, lq, lk) > 0.4
    mask[0, 0, 2] = False  # one query row with no key at all
    return mask


# "triton" runs through Triton's interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET=1)
BACKENDS = ["eager", "torch", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "general"])
def test_backends_agree_with_the_reference(backend, mask_kind):
    q, k, v = _qkv(d=16)
    mask = {
        "none": None,
        "padding": torch.tensor([[True] * 5 + [False] * 2, [True] * 7]).view(2, 1, 1, 7),
        "causal": torch.ones(5, 7, dtype=torch.bool).tril().view(1, 1, 5, 7),
        "general": _mask(),
    }[mask_kind]
    out = T.scaled_dot_product_attention(q, k, v, mask, backend=backend)
    full = torch.ones(1, 1, 5, 7, dtype=torch.bool) if mask is None else mask
    torch.testing.assert_close(out.double(), _reference(q, k, v, full), rtol=1e-5, atol=1e-5)
    if mask_kind == "general":
        assert torch.equal(out[0, :, 2], torch.zeros(3, 16))


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_have_zero_finite_gradients(backend):
    q, k, v = (t.requires_grad_(True) for t in _qkv(d=16))
    mask = _mask()
    T.scaled_dot_product_attention(q, k, v, mask, backend=backend).sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[0, :, 2], torch.zeros(3, 16))


def test_eager_reference_in_half_precision_has_no_overflow():
    q, k, v = _qkv(dtype=torch.float16)
    mask = _mask()
    out, p = T.attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), _reference(q, k, v, mask), rtol=5e-3, atol=5e-3)
    assert torch.equal(p[~mask.expand_as(p)], torch.zeros_like(p[~mask.expand_as(p)]))


def test_dropout_applies_only_when_training_and_rescales():
    torch.manual_seed(1)
    mha = T.MultiHeadedAttention(2, 16, dropout=0.5, backend="eager")
    x = torch.randn(2, 6, 16)
    mha.eval()
    assert torch.equal(mha(x, x, x), mha(x, x, x))
    mha.train()
    a, b = mha(x, x, x), mha(x, x, x)
    assert not torch.equal(a, b)
    mha.record_attention = True
    mha(x, x, x)
    kept = mha.attn[mha.attn > 0]
    assert 0.3 < (mha.attn > 0).float().mean() < 0.7
    assert kept.sum() > 0


def test_record_attention_keeps_probabilities():
    mha = T.MultiHeadedAttention(2, 16, dropout=0.0).eval()
    x = torch.randn(2, 6, 16)
    assert mha.attn is None
    mha.record_attention = True
    mha(x, x, x, T.subsequent_mask(6))
    assert mha.attn.shape == (2, 2, 6, 6)
    torch.testing.assert_close(mha.attn.sum(-1), torch.ones(2, 2, 6))
    assert torch.equal(mha.attn[..., 0, 1:], torch.zeros(2, 2, 5))


def test_multi_head_attention_matches_torch_across_backends():
    mha = T.MultiHeadedAttention(4, 16, dropout=0.0).eval()
    x, m = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    mask = torch.rand(2, 1, 9) > 0.3
    with T.use_backend("eager"):
        eager = mha(x, m, m, mask)
    with T.use_backend("torch"):
        via_torch = mha(x, m, m, mask)
    torch.testing.assert_close(eager, via_torch, rtol=1e-5, atol=1e-5)


def test_dropout_p_is_validated_as_torch_validates_it():
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match=r"dropout probability has to be between 0 and 1, but got 1.5"):
        T.scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    # dropout_p=1.0 drops everything, as in torch's function
    assert torch.equal(T.scaled_dot_product_attention(q, k, v, dropout_p=1.0), torch.zeros(2, 3, 5, 8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_given_scale_replaces_one_over_sqrt_d_k(backend):
    q, k, v = _qkv(d=16)
    mask = _mask()
    out = T.scaled_dot_product_attention(q, k, v, mask, scale=0.37, backend=backend)
    # softmax(Q K^T * 0.37) = softmax((Q * 0.37 * 4) K^T / sqrt(16)): the reference with a rescaled query
    torch.testing.assert_close(out.double(), _reference(q * 0.37 * 4, k, v, mask), rtol=1e-5, atol=1e-5)


def test_values_may_be_wider_than_keys_except_on_the_kernel():
    q, k = _qkv(d=16)[:2]
    v = torch.randn(2, 3, 7, 32)
    for backend in ("eager", "torch"):
        out = T.scaled_dot_product_attention(q, k, v, backend=backend)
        torch.testing.assert_close(
            out.double(), _reference(q, k, v, torch.ones(1, 1, 5, 7, dtype=torch.bool)), rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="attention backend 'triton' cannot run these inputs: v head_dim"):
        T.scaled_dot_product_attention(q, k, v, backend="triton")
