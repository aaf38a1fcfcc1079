"""The attention reference, its backends, and how a backend is chosen."""

import importlib
import logging

import pytest
import torch
import torch.nn.functional as F

import transformer as T
attention_module = importlib.import_module("transformer.attention")  # the package re-exports the function `attention`


def _qkv(b=2, h=3, lq=5, lk=7, d=8, dtype=torch.float32):
    return (torch.randn(b, h, lq, d, dtype=dtype), torch.randn(b, h, lk, d, dtype=dtype),
            torch.randn(b, h, lk, d, dtype=dtype))


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
    eager = mha(x, m, m, mask)
    with T.use_backend("torch"):
        via_torch = mha(x, m, m, mask)
    torch.testing.assert_close(eager, via_torch, rtol=1e-5, atol=1e-5)


def test_auto_uses_eager_on_cpu(monkeypatch):
    chosen = []
    monkeypatch.setattr(attention_module, "attention", _spy(attention_module.attention, chosen))
    q, k, v = _qkv()
    T.scaled_dot_product_attention(q, k, v, backend="auto")
    assert chosen == ["eager"]


def _spy(fn, log):
    def wrapper(*args, **kwargs):
        log.append("eager")
        return fn(*args, **kwargs)
    wrapper.unchecked = wrapper
    return wrapper


def test_precedence_argument_over_context_over_config(monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention",
                        lambda *a, **kw: seen.append("torch") or real(*a, **kw))
    monkeypatch.setattr(attention_module, "attention", _spy(attention_module.attention, seen))
    mha = T.MultiHeadedAttention(2, 8, dropout=0.0, backend="torch").eval()
    x = torch.randn(1, 3, 8)
    mha(x, x, x)
    with T.use_backend("eager"):
        mha(x, x, x)
        q, k, v = _qkv(d=4)
        T.scaled_dot_product_attention(q, k, v, backend="torch")
    mha(x, x, x)
    assert seen == ["torch", "eager", "torch", "torch"]


def test_unknown_backend_is_rejected():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="attention backend must be one of 'auto', 'eager', 'torch', 'triton'; got 'flash'"):
        T.scaled_dot_product_attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="got 'cudnn'"):
        with T.use_backend("cudnn"):
            pass


def test_explicit_triton_never_falls_back_silently(monkeypatch):
    monkeypatch.setattr(attention_module, "_triton_reason", lambda *a: "CPU tensors need TRITON_INTERPRET=1")
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="attention backend 'triton' cannot run these inputs: CPU tensors need TRITON_INTERPRET=1"):
        T.scaled_dot_product_attention(q, k, v, backend="triton")


def test_auto_logs_why_it_falls_back(monkeypatch, caplog):
    monkeypatch.setattr(attention_module, "_triton_reason", lambda *a: "head_dim 300 is above 256")
    q, k, v = _qkv()
    fake_cuda = type("FakeCuda", (), {"is_cuda": True})()
    with caplog.at_level(logging.INFO, logger="transformer.attention"):
        assert attention_module._resolve("auto", fake_cuda, k, v, None, 0.0) == "eager"
    assert "falls back to eager: head_dim 300 is above 256" in caplog.text


def test_dropout_p_is_validated():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        T.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
