"""Our kernel as a provider in torch's flash-attention registry (transformer.integrations.sdpa_registry).

The adapters between aten's flash signatures and the kernel are plain functions: called directly on CPU tensors
with the kernel under TRITON_INTERPRET=1, against torch's math reference (outputs, the logsumexp's layout, gradients
through the backward adapter, dropout's seed carried from forward to backward). Activation and restore are checked in
the dispatcher's table; the dispatch itself (F.scaled_dot_product_attention on CUDA) only on a GPU.
"""

import math
import pathlib

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer.integrations import sdpa_registry as registry

HAS_REGISTRY = registry.missing_reason() is None


def _math(q, k, v, **kwargs):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


def _qkv(dtype=torch.float32, b=2, h=2, q_len=5, k_len=7, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, n, d, generator=g).to(dtype) for n in (q_len, k_len, k_len))


def _rule(mine, theirs, exact, what):
    """The FlashAttention rule: at most twice the error of torch's function in the same dtype, plus a floor."""
    floor = 1e-5 if mine.dtype == torch.float32 else 1e-3
    err, torch_err = ((t.double() - exact).abs().max().item() for t in (mine, theirs))
    assert err <= 2 * torch_err + floor * max(1.0, exact.abs().max().item()), (what, err, torch_err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_sdpa_flash_adapters_match_torchs_math_forward_logsumexp_and_gradients(dtype, causal):
    q, k, v = _qkv(dtype, q_len=6, k_len=6 if causal else 9)
    scale = 0.3
    result = registry.sdpa_flash_forward(q, k, v, 0.0, causal, False, scale=scale)
    out, lse, cum_q, cum_k, max_q, max_k, rng_state, offset, debug = result
    assert (cum_q, cum_k, max_q, max_k) == (None, None, q.size(2), k.size(2))
    assert rng_state.shape == (2,) and rng_state.dtype == torch.uint64 and offset.dtype == torch.uint64
    assert debug.numel() == 0 and out.shape == q.shape and out.dtype == dtype
    exact_in = [t.double().requires_grad_() for t in (q, k, v)]
    exact = _math(*exact_in, is_causal=causal, scale=scale)
    low_in = [t.clone().requires_grad_() for t in (q, k, v)]
    low = _math(*low_in, is_causal=causal, scale=scale)
    _rule(out, low, exact, "out")
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    assert lse.shape == (2, 2, 6) and lse.dtype == torch.float32  # (batch, heads, q_len), natural log
    torch.testing.assert_close(
        lse.double(), scores.logsumexp(-1), atol=2e-3 if dtype == torch.float16 else 1e-5, rtol=1e-4
    )
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    exact.backward(g.double())
    low.backward(g)
    grads = registry.sdpa_flash_backward(
        g, q, k, v, out, lse, None, None, 6, k.size(2), 0.0, causal, rng_state, offset, scale=scale
    )
    for name, mine, theirs, ref in zip(("dq", "dk", "dv"), grads, low_in, exact_in, strict=True):
        assert mine.shape == ref.shape and mine.dtype == dtype
        _rule(mine, theirs.grad, ref.grad, name)


def test_the_flash_attention_adapters_take_batch_seq_heads_dim():
    """aten::_flash_attention_forward/_backward: (batch, seq, heads, dim) in and out, logsumexp (batch, heads, q)."""
    q, k, v = (t.transpose(1, 2).contiguous() for t in _qkv(q_len=4, k_len=6))  # (batch, seq, heads, dim)
    out, lse, rng_state, offset, debug = registry.flash_forward(q, k, v, None, None, 4, 6, 0.0, False, False)
    want = _math(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    assert out.shape == q.shape and out.is_contiguous() and lse.shape == (2, 2, 4)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    _math(*(t.transpose(1, 2) for t in leaves)).transpose(1, 2).backward(g)
    grads = registry.flash_backward(g, q, k, v, out, lse, None, None, 4, 6, 0.0, False, rng_state, offset)
    for mine, leaf in zip(grads, leaves, strict=True):
        assert mine.shape == leaf.shape
        torch.testing.assert_close(mine, leaf.grad, atol=1e-5, rtol=1e-5)
    inplace = torch.empty_like(q)
    lse2 = registry._flash_forward_no_dropout_inplace(inplace, q, k, v, None, None, 4, 6, 0.0, False, False)
    torch.testing.assert_close(inplace, out)
    torch.testing.assert_close(lse2, lse)


def test_dropout_state_goes_from_the_forward_to_the_backward():
    """The seed comes back in rng_state, and the backward drops exactly what the forward dropped: with equal scores
    and identity values the output is the dropped probability matrix P, and grad_value = P^T grad_out."""
    p, s = 0.3, 16
    q, k = torch.zeros(1, 2, 32, s), torch.randn(1, 2, s, s)
    v = torch.eye(s).expand(1, 2, s, s).contiguous()
    out, lse, _, _, _, _, rng_state, offset, _ = registry.sdpa_flash_forward(q, k, v, p)
    again = registry.sdpa_flash_forward(q, k, v, p)
    assert rng_state.view(torch.int64)[0] != 0 and not torch.equal(again[0], out)  # a fresh seed per call
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.06
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (s * (1 - p))))
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    dq, dk, dv = registry.sdpa_flash_backward(g, q, k, v, out, lse, None, None, 32, s, p, False, rng_state, offset)
    torch.testing.assert_close(dv, out.transpose(-2, -1) @ g, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "arguments,reason",
    [
        ({"cum_seq_q": torch.tensor([0, 4], dtype=torch.int32)}, "cum_seq_q is not supported"),
        ({"return_debug_mask": True}, "return_debug_mask is not supported"),
        ({"window_size_left": 2}, "window_size_left is not supported"),
        ({"alibi_slopes": torch.ones(2)}, "alibi_slopes is not supported"),
        ({"seqused_k": torch.tensor([3, 4], dtype=torch.int32)}, "seqused_k is not supported"),
        ({"head_dim": 8}, "head_dim must be in \\[16, 256\\], got 8"),
        ({"dropout_p": 1.0}, "dropout_p must be a float in \\[0, 1\\)"),
    ],
    ids=lambda x: x if isinstance(x, str) else next(iter(x)),
)
def test_unsupported_inputs_raise_runtime_error_with_the_reason(arguments, reason):
    d = arguments.pop("head_dim", 16)
    dropout_p = arguments.pop("dropout_p", 0.0)
    q, k, v = (t.transpose(1, 2) for t in _qkv(q_len=4, k_len=4, d=d))
    kwargs = {name: arguments[name] for name in ("window_size_left", "alibi_slopes", "seqused_k") if name in arguments}
    with pytest.raises(RuntimeError, match=f"typed_transformer flash_attention forward unsupported: {reason}"):
        registry.flash_forward(
            q,
            k,
            v,
            arguments.get("cum_seq_q"),
            None,
            4,
            4,
            dropout_p,
            False,
            arguments.get("return_debug_mask", False),
            **kwargs,
        )


def test_newer_keyword_arguments_are_refused_unless_empty():
    q, k, v = (t.transpose(1, 2) for t in _qkv(q_len=4, k_len=4))
    registry.flash_forward(q, k, v, None, None, 4, 4, 0.0, False, False, some_future_option=None)
    with pytest.raises(RuntimeError, match="some_future_option is not supported"):
        registry.flash_forward(q, k, v, None, None, 4, 4, 0.0, False, False, some_future_option=3)


def _cuda_registration(op: str) -> str:
    lines = [line for line in torch._C._dispatch_dump(f"aten::{op}").splitlines() if line.startswith("CUDA")]
    return lines[0] if lines else ""


@pytest.mark.skipif(not HAS_REGISTRY, reason="this torch has no flash-attention provider registry")
def test_activate_overrides_the_flash_ops_on_cuda_and_restore_gives_them_back():
    assert registry.register() == "typed_transformer"
    assert "typed_transformer" in torch.nn.attention.list_flash_attention_impls()
    ops = [op for op in registry.OVERRIDDEN_OPS if hasattr(torch.ops.aten, op)]
    assert "_scaled_dot_product_flash_attention" in ops and "_scaled_dot_product_flash_attention_backward" in ops
    ours = pathlib.Path(registry.__file__).name
    before = {op: _cuda_registration(op) for op in ops}
    assert not any(ours in line for line in before.values())
    torch.nn.attention.activate_flash_attention_impl("typed_transformer")
    try:
        assert torch.nn.attention.current_flash_attention_impl() == "typed_transformer"
        for op in ops:
            assert ours in _cuda_registration(op), op
    finally:
        torch.nn.attention.restore_flash_attention_impl()
    assert torch.nn.attention.current_flash_attention_impl() is None
    assert {op: _cuda_registration(op) for op in ops} == before


def test_a_torch_without_the_registry_gets_a_clear_error(monkeypatch):
    monkeypatch.delattr(torch.nn.attention, "register_flash_attention_impl", raising=False)
    with pytest.raises(
        RuntimeError,
        match=f"torch {torch.__version__.replace('+', '.')} has no flash-attention "
        "provider registry.*Call transformer.scaled_dot_product_attention instead",
    ):
        registry.register()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not HAS_REGISTRY, reason="needs a CUDA device and the registry")
def test_on_cuda_sdpas_flash_path_runs_our_kernel_forward_and_backward(monkeypatch):
    calls = []
    real_forward = registry._forward
    monkeypatch.setattr(registry, "_forward", lambda *a, **kw: calls.append(a[0]) or real_forward(*a, **kw))
    registry.register()
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    torch.nn.attention.activate_flash_attention_impl("typed_transformer")
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.float().square().sum().backward()
    finally:
        torch.nn.attention.restore_flash_attention_impl()
    assert calls == ["SDPA flash forward"]
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = _math(*exact, is_causal=True)
    ref.square().sum().backward()
    low = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    low_out = _math(*low, is_causal=True)
    low_out.float().square().sum().backward()
    _rule(out, low_out, ref, "out")
    for name, t, low_t, e in zip(("dq", "dk", "dv"), (q, k, v), low, exact, strict=True):
        _rule(t.grad, low_t.grad, e.grad, name)
    assert math.isfinite(out.float().sum().item())
