"""Forward, backward and logsumexp of the fused kernel against a float64 reference.

The rule (from the FlashAttention tests): the kernel's error against float64 may be at most twice the error
that PyTorch eager makes in the same dtype, plus a small floor.
"""

import pytest
import torch

from attention_reference import allowed_matrix, attention, max_err
from transformer.kernels import flash_attention_with_lse

FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3}


def run_and_compare(q, k, v, *, mask=None, key_mask=None, key_lengths=None, causal=False, scale=None):
    """Check out, lse, dq, dk, dv against float64; return the float64 reference (out, grads) and the kernel's."""
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    allowed = allowed_matrix(batch, heads, q_len, k_len, mask=mask, key_mask=key_mask, key_lengths=key_lengths,
                             causal=causal, device=q.device)
    grad_out = torch.randn_like(q)

    def grads(fn, *inputs):
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        out, lse = fn(*leaves)
        out.backward(grad_out.to(out.dtype))
        return out.detach(), lse.detach(), [t.grad for t in leaves]

    ref = grads(lambda *x: attention(*x, allowed, scale), q.double(), k.double(), v.double())
    eager = grads(lambda *x: attention(*x, allowed, scale), q, k, v)
    mine = grads(lambda *x: flash_attention_with_lse(*x, mask=mask, key_mask=key_mask, key_lengths=key_lengths,
                                                     causal=causal, scale=scale), q, k, v)
    assert mine[0].dtype == q.dtype and mine[0].shape == q.shape
    assert mine[1].dtype == torch.float32 and mine[1].shape == (batch, heads, q_len)
    floor = FLOOR[q.dtype]
    pairs = [("out", mine[0], eager[0], ref[0]), ("lse", mine[1], eager[1], ref[1])]
    pairs += [(name, m, e, r) for name, m, e, r in zip(("dq", "dk", "dv"), mine[2], eager[2], ref[2])]
    for name, m, e, r in pairs:
        assert torch.isfinite(m).all() or name == "lse", f"{name} has non-finite values"
        if name == "lse":
            assert torch.equal(m.isinf(), r.isinf()), "lse must be -inf exactly on rows with no allowed key"
            m, e, r = (t.masked_fill(r.isinf(), 0.0) for t in (m, e, r))
        scale_ = max(1.0, r.abs().max().item())
        assert max_err(m, r) <= 2 * max_err(e, r) + floor * scale_, (
            f"{name}: kernel error {max_err(m, r):.3g} vs eager error {max_err(e, r):.3g}")
    empty = ~allowed.any(-1)  # rows with no allowed key: exactly zero output and zero dq
    assert (mine[0][empty] == 0).all()
    assert (mine[2][0][empty] == 0).all()
    return ref, mine


def rand(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


LENGTHS = (1, 7, 77, 129)
HEAD_DIMS = (16, 40, 64, 80, 128)
# every ordered pair of different lengths plus two equal ones, head_dim cycling through non powers of two too
PAIRS = [(a, b) for a in LENGTHS for b in LENGTHS if a != b] + [(77, 77), (129, 129)]
SHAPES = [(q_len, k_len, HEAD_DIMS[i % len(HEAD_DIMS)]) for i, (q_len, k_len) in enumerate(PAIRS)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("q_len,k_len,head_dim", SHAPES)
def test_shapes(q_len, k_len, head_dim, dtype, device):
    q = rand((1, 2, q_len, head_dim), dtype, device)
    k, v = rand((1, 2, k_len, head_dim), dtype, device), rand((1, 2, k_len, head_dim), dtype, device)
    run_and_compare(q, k, v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("q_len,k_len", [(77, 45), (45, 77), (1, 33), (65, 65)])
def test_causal_matches_sdpa_top_left(q_len, k_len, dtype, device):
    """is_causal is aligned top-left like F.scaled_dot_product_attention (j <= i), also when q_len != k_len."""
    q, k, v = (rand((2, 2, n, 40), dtype, device) for n in (q_len, k_len, k_len))
    ref, mine = run_and_compare(q, k, v, causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert max_err(ref[0], sdpa) < 1e-10
    assert max_err(mine[0], sdpa) < (1e-5 if dtype == torch.float32 else 1e-2)


def _masks(kind, batch, heads, q_len, k_len, device):
    """Mask arguments of one kind, each with at least one query row that has no allowed key."""
    g = torch.Generator().manual_seed(1)

    def bern(*shape, p=0.6):
        return (torch.rand(*shape, generator=g) < p).to(device)

    args = {}
    if "causal" in kind:
        args["causal"] = True
    if "key_mask" in kind:
        key_mask = bern(batch, k_len)
        key_mask[1] = False  # batch row 1: every key is padding
        args["key_mask"] = key_mask
    if "key_lengths" in kind:
        args["key_lengths"] = torch.tensor([k_len - 3, 0, 1][:batch], device=device)
    if "mask_full" in kind:
        mask = bern(batch, heads, q_len, k_len)
        mask[0, 1, 2] = False
        args["mask"] = mask
    if "mask_2d" in kind:  # (q_len, k_len), broadcast over batch and heads
        mask = bern(q_len, k_len)
        mask[3] = False
        args["mask"] = mask
    if "mask_keys" in kind:  # (batch, 1, 1, k_len)
        mask = bern(batch, 1, 1, k_len)
        mask[0] = False
        args["mask"] = mask
    if "mask_heads" in kind:  # (1, heads, q_len, 1): whole query rows per head
        mask = bern(1, heads, q_len, 1, p=0.8)
        args["mask"] = mask
    return args


MASK_KINDS = [
    "causal", "key_mask", "key_lengths", "mask_full", "mask_2d", "mask_keys", "mask_heads",
    "causal+key_lengths", "causal+key_mask", "mask_2d+key_mask", "causal+mask_full+key_mask+key_lengths",
]


@pytest.mark.parametrize("kind", MASK_KINDS)
def test_masks_fp32(kind, device):
    batch, heads, q_len, k_len = 3, 2, 77, 45
    q = rand((batch, heads, q_len, 40), torch.float32, device)
    k, v = (rand((batch, heads, k_len, 40), torch.float32, device) for _ in range(2))
    run_and_compare(q, k, v, **_masks(kind, batch, heads, q_len, k_len, device))


@pytest.mark.parametrize("kind", ["causal+key_lengths", "mask_2d+key_mask", "mask_heads"])
def test_masks_fp16(kind, device):
    batch, heads, q_len, k_len = 3, 1, 45, 77
    q = rand((batch, heads, q_len, 64), torch.float16, device)
    k, v = (rand((batch, heads, k_len, 64), torch.float16, device) for _ in range(2))
    run_and_compare(q, k, v, **_masks(kind, batch, heads, q_len, k_len, device))


def test_fully_masked_everything_gives_zeros_and_zero_grads(device):
    q, k, v = (rand((2, 1, n, 16), torch.float32, device).requires_grad_() for n in (9, 5, 5))
    out, lse = flash_attention_with_lse(q, k, v, key_lengths=torch.tensor([0, 0], device=device))
    (out.sum() + lse.masked_fill(lse.isinf(), 0).sum()).backward()
    assert (out == 0).all() and (lse == float("-inf")).all()
    for t in (q, k, v):
        assert torch.equal(t.grad, torch.zeros_like(t))


def test_very_negative_scores_with_padding_keys(device):
    """Every allowed score near -220, so exp2(score - lse) is fine but exp2(0 - lse) overflows: a padding key
    (read as zeros, score 0) that slipped past the mask in any kernel would turn gradients into inf or NaN."""
    g = torch.Generator().manual_seed(3)
    q = (8.0 + 0.1 * torch.randn(2, 2, 40, 16, generator=g)).to(device)
    k = (-7.0 + 0.1 * torch.randn(2, 2, 50, 16, generator=g)).to(device)
    v = torch.randn(2, 2, 50, 16, generator=g).to(device)
    for kwargs in ({}, {"causal": True}):
        run_and_compare(q, k, v, key_lengths=torch.tensor([37, 50], device=device), **kwargs)


def test_scale_argument(device):
    q, k, v = (rand((1, 2, n, 32), torch.float32, device) for n in (33, 20, 20))
    run_and_compare(q, k, v, scale=0.5, causal=True)


def test_strided_inputs_and_output_layout(device):
    """q from a (batch, seq, heads, head_dim) tensor, k a slice, v expanded over heads; dO from a transpose."""
    batch, heads, q_len, k_len, head_dim = 2, 3, 37, 41, 40
    q = rand((batch, q_len, heads, head_dim), torch.float32, device).transpose(1, 2)
    k = rand((batch, heads, k_len, 2 * head_dim), torch.float32, device)[..., ::2]
    v = rand((batch, 1, k_len, head_dim), torch.float32, device).expand(batch, heads, k_len, head_dim)
    assert not q.is_contiguous() and not k.is_contiguous() and v.stride(1) == 0
    ref, mine = run_and_compare(q, k, v, causal=True, key_lengths=torch.tensor([30, 41], device=device))
    out = flash_attention_with_lse(q, k, v)[0]
    assert out.stride() == q.stride()  # same layout as q: transposing back is free


def test_logsumexp_gradient(device):
    if device == "cuda":
        pytest.skip("float64 runs only under the Triton interpreter")
    """The logsumexp output is differentiable: d lse_i / d s_ij = p_ij."""
    q, k, v = (rand((1, 2, n, 16), torch.float64, device).requires_grad_() for n in (7, 11, 11))
    key_lengths = torch.tensor([6], device=device)

    def f(*x):
        out, lse = flash_attention_with_lse(*x, causal=True, key_lengths=key_lengths)
        return out, lse

    allowed = allowed_matrix(1, 2, 7, 11, causal=True, key_lengths=key_lengths, device=device)
    weights = torch.randn(1, 2, 7, dtype=torch.float64, device=device)
    (f(q, k, v)[1] * weights).sum().backward()
    mine = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    (attention(q, k, v, allowed)[1] * weights).sum().backward()
    for a, t in zip(mine, (q, k, v)):
        assert max_err(a, torch.zeros_like(t) if t.grad is None else t.grad) < 1e-6
    assert mine[0].abs().max() > 0.01  # the test can fail: dq does depend on lse's gradient
