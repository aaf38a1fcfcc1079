"""GPU-only checks (marked gpu, skipped without CUDA): bf16 at real sizes, determinism, torch.compile."""

import pytest
import torch
from attention_reference import allowed_matrix, attention, compiled_and_eager, max_err

from transformer.kernels import flash_attention, flash_attention_with_lse

pytestmark = pytest.mark.gpu


def _check_against_fp64(dtype, batch, heads, q_len, k_len, head_dim, causal):
    q = torch.randn(batch, heads, q_len, head_dim, device="cuda", dtype=dtype)
    k, v = (torch.randn(batch, heads, k_len, head_dim, device="cuda", dtype=dtype) for _ in range(2))
    key_lengths = torch.tensor([k_len - 17 * i for i in range(batch)], device="cuda")
    allowed = allowed_matrix(batch, heads, q_len, k_len, key_lengths=key_lengths, causal=causal, device="cuda")
    grad_out = torch.randn_like(q)
    results = []
    for fn, cast in (
        (lambda *x: attention(*x, allowed)[0], torch.float64),
        (lambda *x: attention(*x, allowed)[0], dtype),
        (lambda *x: flash_attention(*x, key_lengths=key_lengths, causal=causal), dtype),
    ):
        leaves = [t.to(cast).requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        out.backward(grad_out.to(cast))
        results.append([out] + [t.grad for t in leaves])
    ref, eager, mine = results
    for name, m, e, r in zip(("out", "dq", "dk", "dv"), mine, eager, ref, strict=True):
        assert max_err(m, r) <= 2 * max_err(e, r) + 1e-3 * max(1.0, r.abs().max().item()), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 80, 128])
def test_real_sizes_against_fp64(dtype, causal, head_dim):
    _check_against_fp64(dtype, 2, 4, 1000, 1024 + 37, head_dim, causal)


def test_backward_is_deterministic():
    q, k, v = (torch.randn(2, 8, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad_out = torch.randn_like(q)
    first = None
    for _ in range(50):
        for t in (q, k, v):
            t.grad = None
        flash_attention(q, k, v, causal=True, dropout_p=0.1, seed=3).backward(grad_out)
        grads = [t.grad.clone() for t in (q, k, v)]
        if first is None:
            first = grads
        for a, b in zip(first, grads, strict=True):
            assert torch.equal(a, b)


def test_torch_compile_fullgraph():
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    mask = torch.rand(256, 256, device="cuda") > 0.2

    def f(*x):
        out, lse = flash_attention_with_lse(*x, mask=mask, causal=True, dropout_p=0.1, seed=1)
        return out.float().square().sum() + lse.masked_fill(lse.isinf(), 0.0).sum()

    (loss, grads), (expected, expected_grads) = compiled_and_eager(f, (q, k, v))
    assert torch.allclose(loss, expected, rtol=1e-3)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2)


def _dropout_inputs():
    return [torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.float16) for _ in range(3)]


def test_dropout_in_a_cuda_graph_draws_a_new_mask_every_replay():
    """seed=None inside a captured CUDA graph: the (seed, offset) draw is a device op on torch's CUDA generator,
    so each replay draws a new mask, and torch.manual_seed before replaying reproduces a replay."""
    q, k, v = _dropout_inputs()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and autotune before capturing
        for _ in range(2):
            flash_attention(q, k, v, dropout_p=0.3)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(5)
    graph.replay()
    first = out.clone()
    graph.replay()
    second = out.clone()
    torch.manual_seed(5)
    graph.replay()
    assert not torch.equal(first, second)
    assert torch.equal(first, out)


def test_dropout_compiled_with_reduce_overhead_draws_a_new_mask_every_call():
    q, k, v = _dropout_inputs()
    f = torch.compile(lambda *x: flash_attention(*x, dropout_p=0.3), mode="reduce-overhead")
    outs = [f(q, k, v).clone() for _ in range(4)]
    assert not torch.equal(outs[2], outs[3])
