"""Forward, backward and logsumexp of the fused kernel against a float64 reference.

The rule (from the FlashAttention tests): the kernel's error against float64 may be at most twice the error
that PyTorch eager makes in the same dtype, plus a small floor.
"""

import pytest
import torch
from attention_reference import allowed_matrix, attention, max_err
from kernel_compare import compare_on_views, rand, run_and_compare
from launch_capture import launched, launches

from transformer.kernels import flash_attention_with_lse


def test_block_shape_reaches_every_launch(interpret_blocks):
    """The block shape this test is parametrized with is what the forward, dK/dV and dQ kernels are launched
    with (the delta kernel keeps its fixed 32-row blocks), so the parametrization really runs
    BLOCK_M != BLOCK_N."""
    if interpret_blocks is None:
        pytest.skip("on CUDA the autotuner picks the blocks")
    q, k, v = (torch.randn(1, 1, n, 16, requires_grad=True) for n in (20, 30, 30))
    with launches() as seen:
        flash_attention_with_lse(q, k, v, causal=True)[0].sum().backward()
    assert [name for name, _ in seen] == ["_fwd_kernel", "_delta_kernel", "_dkdv_kernel", "_dq_kernel"]
    for kernel in ("_fwd_kernel", "_dkdv_kernel", "_dq_kernel"):
        args = launched(seen, kernel)
        assert (args["BLOCK_M"], args["BLOCK_N"]) == interpret_blocks, kernel
    assert launched(seen, "_delta_kernel")["BLOCK_M"] == 32


def block_branches(q_len, k_len, kv_ends, causal, block_m, block_n):
    """Which branches of the kernels' block loops these lengths reach with these blocks (worked out here from
    the semantics, not from the kernels): forward / dQ (one program per query block, looping over key blocks)
    and dK/dV (one program per key block, looping over query blocks)."""
    reached = set()
    for kv_end in kv_ends:
        for m0 in range(0, q_len, block_m):  # forward and dQ
            last_q = min(m0 + block_m, q_len) - 1
            for n0 in range(0, k_len, block_n):
                if n0 >= kv_end or (causal and n0 > last_q):
                    reached.add("fwd: key block skipped")
                elif n0 + block_n > kv_end:
                    reached.add("fwd: partly valid key block")
                elif causal and n0 + block_n - 1 > m0:
                    reached.add("fwd: key block crossing the diagonal")
                else:
                    reached.add("fwd: interior key block")
        for n0 in range(0, k_len, block_n):  # dK/dV
            for m0 in range(0, q_len, block_m):
                last_q = min(m0 + block_m, q_len) - 1
                if n0 >= kv_end or (causal and last_q < n0):
                    reached.add("dkdv: query block skipped")
                elif n0 + block_n > kv_end:
                    reached.add("dkdv: partly valid key block")
                elif causal and n0 + block_n - 1 > m0:
                    reached.add("dkdv: query block crossing the diagonal")
                else:
                    reached.add("dkdv: interior query block")
    return reached


# name: (q_len, k_len, masks). Lengths that no block size 16, 32 or 64 divides, long enough (> 2 blocks of 64)
# that every block shape has interior blocks, diagonal blocks, a partly valid last key block and skipped blocks.
EDGE_CASES = {
    "causal-q_len>k_len": (150, 130, {"causal": True}),
    "causal+key_lengths-q_len<k_len": (130, 150, {"causal": True, "key_lengths": [150, 101]}),
    "key_lengths": (100, 150, {"key_lengths": [77, 150]}),
}


@pytest.mark.parametrize("kind", EDGE_CASES)
def test_block_edges(kind, interpret_blocks, device):
    """Forward, lse, dq, dk, dv against float64 on lengths where, for the block shape in use, every kernel
    visits interior blocks (no per-element mask), blocks crossing the causal diagonal, a partly valid last key
    block, and skips whole blocks (after the diagonal, or past a key length)."""
    q_len, k_len, masks = EDGE_CASES[kind]
    kv_ends = masks.get("key_lengths", [k_len])
    causal = masks.get("causal", False)
    fwd = ["interior key block", "partly valid key block", "key block skipped"]
    dkdv = ["interior query block", "partly valid key block", "query block skipped"]
    if causal:
        fwd.append("key block crossing the diagonal")
        dkdv.append("query block crossing the diagonal")
    wanted = {"fwd: " + name for name in fwd} | {"dkdv: " + name for name in dkdv}
    reached = block_branches(q_len, k_len, kv_ends, causal, *(interpret_blocks or (32, 32)))
    assert wanted <= reached, f"not reached: {sorted(wanted - reached)}"
    masks = {name: torch.tensor(val, device=device) if isinstance(val, list) else val for name, val in masks.items()}
    q = rand((2, 1, q_len, 40), torch.float32, device)
    k, v = (rand((2, 1, k_len, 40), torch.float32, device) for _ in range(2))
    run_and_compare(q, k, v, **masks)


def _rows_then_padding(batch, heads, k_len, extra, head_dim, device):
    """Bases for k and v of (batch, heads, k_len + extra, head_dim) whose rows past k_len hold large values:
    the attention gets their first k_len rows (views), so a kernel that read or attended past k_len gives a
    visibly wrong answer (rather than reading unallocated memory)."""
    k = rand((batch, heads, k_len + extra, head_dim), torch.float32, device)
    v = rand((batch, heads, k_len + extra, head_dim), torch.float32, device)
    k[:, :, k_len:] *= 4.0
    v[:, :, k_len:] = 50.0
    return k, v


def _first_rows(k_len):
    return lambda q, k, v, g: (q, k[:, :, :k_len], v[:, :, :k_len], g)


@pytest.mark.one_block_shape
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_key_lengths_past_k_len_mean_k_len(causal, device):
    """key_lengths larger than k_len are clamped to k_len (docs/kernels.md): the kernels read and attend
    exactly the k_len keys, and the result is bitwise the one of the clamped lengths."""
    batch, heads, q_len, k_len, head_dim = 3, 1, 90, 75, 32
    lengths = torch.tensor([k_len + 1, k_len + 20, k_len], device=device)  # past the end by 1 and by 20 rows
    k, v = _rows_then_padding(batch, heads, k_len, 24, head_dim, device)
    bases = (
        rand((batch, heads, q_len, head_dim), torch.float32, device),
        k,
        v,
        rand((batch, heads, q_len, head_dim), torch.float32, device),
    )
    ref, mine, _ = compare_on_views(bases, _first_rows(k_len), key_lengths=lengths, causal=causal)
    clamped = compare_on_views(bases, _first_rows(k_len), key_lengths=lengths.clamp(0, k_len), causal=causal)[1]
    assert torch.equal(mine[0], clamped[0]) and torch.equal(mine[1], clamped[1])
    for grad, grad_clamped in zip(mine[2], clamped[2], strict=True):
        assert torch.equal(grad, grad_clamped)
    assert (mine[2][1][:, :, k_len:] == 0).all()  # nothing flows to the rows past k_len


@pytest.mark.one_block_shape
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_key_lengths_huge_negative_and_zero(dtype, device):
    """Every integer length means its clamp to [0, k_len]: int64 lengths past 2**31 (2**32 + 3, int64 max as
    "no limit", whose low 32 bits are 3 and -1) mean k_len; zero and negative lengths mask every key of their
    batch row (output 0, lse -inf, zero gradients), whatever their high bits."""
    k_len = 75
    values = {
        torch.int64: [2**32 + 3, 2**63 - 1, -5, 0, -(2**32) + 40, 40],
        torch.int32: [2**31 - 1, k_len + 1, -5, 0, -(2**31), 40],
    }[dtype]
    batch, heads, q_len, head_dim = len(values), 1, 50, 32
    lengths = torch.tensor(values, dtype=dtype, device=device)
    k, v = _rows_then_padding(batch, heads, k_len, 24, head_dim, device)
    bases = (
        rand((batch, heads, q_len, head_dim), torch.float32, device),
        k,
        v,
        rand((batch, heads, q_len, head_dim), torch.float32, device),
    )
    ref, mine, _ = compare_on_views(bases, _first_rows(k_len), key_lengths=lengths, causal=True)
    assert (mine[0][2:4] == 0).all() and (mine[1][2:4] == float("-inf")).all()  # rows with length -5 and 0
    assert mine[0][[0, 1, 5]].abs().amin(-1).gt(0).all()  # rows with a long, huge or small length see keys
    for grad in mine[2]:
        assert (grad[2:4] == 0).all()


# layout: (q, k, v, grad_out) bases and the (batch, heads, len, head_dim) views of them the kernels get.
# "sliced": no tensor is dense, and none has a unit head_dim stride; v is expanded over heads (stride 0).
# "permuted": dense but not contiguous, so out, dq, dk and dv (torch.empty_like) get these layouts too.
LENGTHS = (1, 7, 77, 129)
HEAD_DIMS = (16, 40, 64, 80, 128)
# every ordered pair of different lengths plus two equal ones, head_dim cycling through non powers of two too
PAIRS = [(a, b) for a in LENGTHS for b in LENGTHS if a != b] + [(77, 77), (129, 129)]
SHAPES = [(q_len, k_len, HEAD_DIMS[i % len(HEAD_DIMS)]) for i, (q_len, k_len) in enumerate(PAIRS)]


@pytest.mark.one_block_shape
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("q_len,k_len,head_dim", SHAPES)
def test_shapes(q_len, k_len, head_dim, dtype, device):
    q = rand((1, 2, q_len, head_dim), dtype, device)
    k, v = rand((1, 2, k_len, head_dim), dtype, device), rand((1, 2, k_len, head_dim), dtype, device)
    run_and_compare(q, k, v)


@pytest.mark.one_block_shape
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
    "causal",
    "key_mask",
    "key_lengths",
    "mask_full",
    "mask_2d",
    "mask_keys",
    "mask_heads",
    "causal+key_lengths",
    "causal+key_mask",
    "mask_2d+key_mask",
    "causal+mask_full+key_mask+key_lengths",
]


@pytest.mark.one_block_shape
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_masks_fp32(kind, device):
    batch, heads, q_len, k_len = 3, 2, 77, 45
    q = rand((batch, heads, q_len, 40), torch.float32, device)
    k, v = (rand((batch, heads, k_len, 40), torch.float32, device) for _ in range(2))
    run_and_compare(q, k, v, **_masks(kind, batch, heads, q_len, k_len, device))


@pytest.mark.one_block_shape
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


@pytest.mark.one_block_shape
def test_scale_argument(device):
    q, k, v = (rand((1, 2, n, 32), torch.float32, device) for n in (33, 20, 20))
    run_and_compare(q, k, v, scale=0.5, causal=True)


@pytest.mark.one_block_shape
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
    for a, t in zip(mine, (q, k, v), strict=True):
        assert max_err(a, torch.zeros_like(t) if t.grad is None else t.grad) < 1e-6
    assert mine[0].abs().max() > 0.01  # the test can fail: dq does depend on lse's gradient


# --- side inputs (key_lengths, key_mask, mask, the logsumexp's gradient) in any layout: each is read where it
# lies, through its own strides. Every layout below hides, where a contiguous read of the same memory would land,
# values that give a visibly different answer (a length of 0 or k_len, the opposite key mask, ...).
