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


def test_explicit_seed_dropout_is_captured_and_replayed_with_the_same_mask():
    """seed=int inside torch.cuda.graph: no host-to-device copy (it used to raise during capture); every replay
    draws the seed's mask, equal to an eager call with that seed. Tuned ahead with kernels.tune."""
    from transformer.kernels import tune

    q, k, v = _dropout_inputs()
    tune(q, k, v, dropout_p=0.3, backward=False)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attention(q, k, v, dropout_p=0.3, seed=9)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert torch.equal(first, out)
    assert torch.equal(out, flash_attention(q, k, v, dropout_p=0.3, seed=9))


def test_untuned_key_during_capture_raises_a_clear_error():
    from transformer.kernels import _tuning

    if not _tuning._tuned:
        pytest.skip("configs are pinned: nothing is timed during capture")
    q = torch.randn(3, 4, 333, 64, device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="kernels.tune"):
        with torch.cuda.graph(graph):
            flash_attention(q, q, q, causal=True)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensors_on_the_second_gpu_while_the_first_is_current():
    q, k, v = (torch.randn(2, 4, 300, 64, device="cuda:1", dtype=torch.float16, requires_grad=True) for _ in range(3))
    with torch.cuda.device(0):
        out = flash_attention(q, k, v, causal=True)
        out.float().sum().backward()
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    expected = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=True)
    expected.float().sum().backward()
    assert max_err(out, expected) < 1e-2
    for mine, theirs in zip((q, k, v), ref, strict=True):
        assert max_err(mine.grad, theirs.grad) < 2e-2


def test_expanded_grad_out_matches_a_contiguous_one():
    q, k, v = (torch.randn(2, 4, 500, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grads = []
    for grad in (torch.ones(2, 4, 500, 64, device="cuda", dtype=torch.bfloat16), None):
        out = flash_attention(q, k, v)
        grads.append(torch.autograd.grad(out if grad is not None else out.sum(), (q, k, v), grad))
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("pinned", ["first"])
def test_first_configs_launch_at_head_dim_256(pinned, monkeypatch):
    """TYPED_TRANSFORMER_KERNEL_CONFIGS=first at head_dim 256 pins the first config that fits in shared memory (the
    first of the list needs 256 KiB, more than an H100 block has): forward and backward launch."""
    import importlib

    from transformer.kernels import _backward, _forward

    monkeypatch.setenv("TYPED_TRANSFORMER_KERNEL_CONFIGS", pinned)
    for module in (_forward, _backward):
        importlib.reload(module)
    try:
        q, k, v = (
            torch.randn(1, 2, 512, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)
        )
        flash_attention(q, k, v, causal=True).float().sum().backward()
        torch.cuda.synchronize()
        assert torch.isfinite(q.grad).all()
    finally:
        monkeypatch.delenv("TYPED_TRANSFORMER_KERNEL_CONFIGS")
        for module in (_forward, _backward):
            importlib.reload(module)
