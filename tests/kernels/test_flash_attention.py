"""Forward, backward and logsumexp of the fused kernel against a float64 reference.

The rule (from the FlashAttention tests): the kernel's error against float64 may be at most twice the error
that PyTorch eager makes in the same dtype, plus a small floor.
"""

import pytest
import torch
from attention_reference import allowed_matrix, attention, max_err
from launch_capture import launched, launches

from transformer.kernels import flash_attention_with_lse

FLOOR = {torch.float32: 1e-5, torch.float16: 1e-3}


def assert_close_to_reference(name, mine, eager, ref, dtype):
    """The FlashAttention rule: the kernel's error against float64 is at most twice eager's, plus a floor."""
    scale_ = max(1.0, ref.abs().max().item())
    assert max_err(mine, ref) <= 2 * max_err(eager, ref) + FLOOR[dtype] * scale_, (
        f"{name}: kernel error {max_err(mine, ref):.3g} vs eager error {max_err(eager, ref):.3g}"
    )


def _identity(q, k, v, grad_out):
    return q, k, v, grad_out


def compare_on_views(
    bases,
    views=_identity,
    *,
    mask=None,
    key_mask=None,
    key_lengths=None,
    causal=False,
    scale=None,
    forward_kernels=None,
):
    """Check out, lse and the gradients against float64 and eager PyTorch (the FlashAttention rule).

    ``bases`` = (q, k, v, grad_out) tensors; the attention gets ``views(*bases)``, views of them (never copies),
    so whatever strides the views have reach the kernels; the gradients compared are those of the bases
    q, k, v. Returns (ref, mine, (seen, given)): the float64 reference and the kernel's (out, lse, base
    gradients), every kernel launch of the kernel's run (see :func:`launches`), and the views that run gave
    the attention as {"Q", "K", "V", "DO"}. ``forward_kernels``: the launches the forward must make, e.g.
    ("_fwd_kernel", "_combine_kernel") for the split-KV forward; None: either forward, as the launcher chose."""
    q, k, _, _ = views(*bases)
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    allowed = allowed_matrix(
        batch,
        heads,
        q_len,
        k_len,
        mask=mask,
        key_mask=key_mask,
        key_lengths=key_lengths,
        causal=causal,
        device=q.device,
    )

    given = {}

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype, copy=True) for t in bases]
        for t in leaves[:3]:
            t.requires_grad_(True)
        given.update(zip(("Q", "K", "V", "DO"), views(*leaves), strict=True))
        out, lse = fn(given["Q"], given["K"], given["V"])
        out.backward(given["DO"])
        return out.detach(), lse.detach(), [t.grad for t in leaves[:3]]

    ref = grads(lambda *x: attention(*x, allowed, scale), torch.float64)
    eager = grads(lambda *x: attention(*x, allowed, scale), q.dtype)
    with launches() as seen:
        mine = grads(
            lambda *x: flash_attention_with_lse(
                *x, mask=mask, key_mask=key_mask, key_lengths=key_lengths, causal=causal, scale=scale
            ),
            q.dtype,
        )
    names = [name for name, _ in seen]
    forward = tuple(names[:-3]) if forward_kernels is None else tuple(forward_kernels)
    assert forward in (("_fwd_kernel",), ("_fwd_kernel", "_combine_kernel"))
    assert names == [*forward, "_delta_kernel", "_dkdv_kernel", "_dq_kernel"]
    assert mine[0].dtype == q.dtype and mine[0].shape == q.shape
    assert mine[1].dtype == torch.float32 and mine[1].shape == (batch, heads, q_len)
    pairs = [("out", mine[0], eager[0], ref[0]), ("lse", mine[1], eager[1], ref[1])]
    pairs += [(name, m, e, r) for name, m, e, r in zip(("dq", "dk", "dv"), mine[2], eager[2], ref[2], strict=True)]
    for name, m, e, r in pairs:
        assert torch.isfinite(m).all() or name == "lse", f"{name} has non-finite values"
        if name == "lse":
            assert torch.equal(m.isinf(), r.isinf()), "lse must be -inf exactly on rows with no allowed key"
            m, e, r = (t.masked_fill(r.isinf(), 0.0) for t in (m, e, r))
        assert_close_to_reference(name, m, e, r, q.dtype)
    empty = ~allowed.any(-1)  # rows with no allowed key: exactly zero output and zero dq
    assert (mine[0][empty] == 0).all()
    assert (launched(seen, "_dq_kernel")["DQ"][empty] == 0).all()
    return ref, mine, (seen, given)


def run_and_compare(q, k, v, **masks):
    """compare_on_views on contiguous copies of q, k, v (and a random grad_out); returns (ref, mine)."""
    bases = [t.contiguous() for t in (q, k, v)] + [torch.randn_like(q).contiguous()]
    return compare_on_views(bases, **masks)[:2]


def rand(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


# --- block shapes: under the interpreter these run once per (BLOCK_M, BLOCK_N) in conftest.BLOCK_SHAPES


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
def _layouts(batch, heads, q_len, k_len, d):
    return {
        "sliced": (
            [
                (batch, q_len, heads, 2 * d),
                (batch, heads, d, k_len + 5),
                (k_len, batch, 1, 3 * d),
                (heads, batch, d + 3, q_len),
            ],
            lambda q, k, v, g: (
                q[..., 1::2].transpose(1, 2),
                k[..., 2 : 2 + k_len].transpose(2, 3),
                v[..., ::3].permute(1, 2, 0, 3).expand(batch, heads, k_len, d),
                g[:, :, 3:].permute(1, 0, 3, 2),
            ),
        ),
        "permuted": (
            [(batch, q_len, heads, d), (heads, batch, k_len, d), (k_len, batch, heads, d), (heads, q_len, batch, d)],
            lambda q, k, v, g: (q.transpose(1, 2), k.transpose(0, 1), v.permute(1, 2, 0, 3), g.permute(2, 0, 1, 3)),
        ),
    }


@pytest.mark.one_block_shape
@pytest.mark.parametrize("layout", ["sliced", "permuted"])
def test_strided_inputs(layout, device):
    """q, k, v and grad_out reach every kernel (forward, delta, dK/dV, dQ) as the very non-contiguous views the
    caller made, with their strides (checked at each kernel launch: nothing copies them), and out, lse and the
    gradients of the tensors they are views of match float64. Each tensor has its own stride pattern, so a
    kernel that read one tensor with another's strides, or ignored a stride, would be wrong."""
    batch, heads, q_len, k_len, d = 2, 3, 37, 41, 40
    shapes, views = _layouts(batch, heads, q_len, k_len, d)[layout]
    bases = [rand(shape, torch.float32, device) for shape in shapes]
    q, k, v, g = views(*bases)
    assert (q.shape, k.shape, v.shape, g.shape) == (
        (batch, heads, q_len, d),
        (batch, heads, k_len, d),
        (batch, heads, k_len, d),
        (batch, heads, q_len, d),
    )
    strides = {"Q": q.stride(), "K": k.stride(), "V": v.stride(), "DO": g.stride()}
    assert not any(t.is_contiguous() for t in (q, k, v, g))
    assert len(set(strides.values())) == 4  # four different layouts
    if layout == "sliced":
        assert all(s[3] != 1 for s in strides.values()) and v.stride(1) == 0
    ref, mine, (seen, given) = compare_on_views(
        bases, views, causal=True, key_lengths=torch.tensor([30, 41], device=device)
    )
    assert {name: t.stride() for name, t in given.items()} == strides  # the kernel's run had these layouts too
    # every kernel got the very views (same memory, same strides) and was told their strides
    reads = {"_fwd_kernel": "Q K V", "_delta_kernel": "DO", "_dkdv_kernel": "Q K V DO", "_dq_kernel": "Q K V DO"}
    prefix = {"Q": ("q", "m"), "K": ("k", "n"), "V": ("v", "n"), "DO": ("d", "m")}
    # except grad_out with a strided head_dim: the backward copies it to a contiguous layout first (vectorised
    # loads, as FlashAttention does), and every backward kernel reads that one copy with its strides
    copied = given["DO"].stride(-1) != 1
    for kernel, tensors in reads.items():
        args = launched(seen, kernel)
        for name in tensors.split():
            view, (p, seq) = given[name], prefix[name]
            if name == "DO" and copied:
                view = launched(seen, "_delta_kernel")["DO"]
                assert view.is_contiguous() and torch.equal(view, given["DO"]), kernel
            assert args[name].data_ptr() == view.data_ptr() and args[name].stride() == view.stride(), (kernel, name)
            assert tuple(args[f"s_{p}{axis}"] for axis in ("b", "h", seq, "d")) == view.stride(), (kernel, name)
    assert copied == (layout == "sliced")  # the other layouts' grad_out reaches the kernels uncopied
    out, delta_args = launched(seen, "_fwd_kernel")["O"], launched(seen, "_delta_kernel")
    assert delta_args["O"].data_ptr() == out.data_ptr()
    assert tuple(delta_args[f"s_o{axis}"] for axis in "bhmd") == out.stride()
    if layout == "permuted":  # the output and the gradient buffers (torch.empty_like) take the inputs' layouts
        written = [
            ("_fwd_kernel", "O", "o", "m", "Q"),
            ("_dkdv_kernel", "DK", "dk", "n", "K"),
            ("_dkdv_kernel", "DV", "dv", "n", "V"),
            ("_dq_kernel", "DQ", "dq", "m", "Q"),
        ]
        for kernel, name, p, seq, like in written:
            args = launched(seen, kernel)
            assert args[name].stride() == strides[like], (kernel, name)
            assert tuple(args[f"s_{p}{axis}"] for axis in ("b", "h", seq, "d")) == strides[like], (kernel, name)
        assert flash_attention_with_lse(q, k, v)[0].stride() == q.stride()  # transposing back is free


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
def _side_inputs(kind, batch, heads, q_len, k_len, device):
    g = torch.Generator().manual_seed(7)

    def bern(*shape, p=0.6):
        return torch.rand(*shape, generator=g) < p

    lengths = [k_len - 3, 5, 0]
    if kind == "key_lengths-column":  # lengths[:, 0] of a (batch, 2) tensor whose other column is k_len
        base = torch.tensor([[n, k_len] for n in lengths])
        return {"key_lengths": base.to(device)[:, 0]}
    if kind == "key_lengths-expanded":  # torch.tensor([7]).expand(batch); the memory after the 7 holds 0s
        return {"key_lengths": torch.tensor([7, 0, 0]).to(device)[:1].expand(batch)}
    if kind == "key_lengths-int32-stepped":  # every other element, int32
        base = torch.tensor([x for n in lengths for x in (n, 0)], dtype=torch.int32)
        return {"key_lengths": base.to(device)[::2]}
    if kind == "key_mask-transposed":  # a (k_len, batch) tensor transposed
        return {"key_mask": bern(k_len, batch).to(device).t()}
    if kind == "key_mask-sliced":  # every other column; the columns in between are the opposite
        keys = bern(batch, k_len)
        return {"key_mask": torch.stack([keys, ~keys], -1).reshape(batch, 2 * k_len).to(device)[:, ::2]}
    if kind == "key_mask-expanded":  # one row for every batch row (stride 0)
        return {"key_mask": bern(1, k_len).to(device).expand(batch, k_len)}
    if kind == "mask-transposed":  # (batch, heads, k_len, q_len) storage
        return {"mask": bern(batch, heads, k_len, q_len).to(device).transpose(-1, -2)}
    if kind == "mask-sliced":  # odd columns of a wider mask whose even columns are the opposite
        mask = bern(batch, heads, q_len, k_len)
        wide = torch.stack([~mask, mask], -1).reshape(batch, heads, q_len, 2 * k_len)
        return {"mask": wide.to(device)[..., 1::2]}
    if kind == "mask-expanded-heads+causal":  # expanded over heads by the caller (stride 0), plus causal
        return {"mask": bern(batch, 1, q_len, k_len).to(device).expand(batch, heads, q_len, k_len), "causal": True}
    raise ValueError(kind)


SIDE_INPUT_KINDS = [
    "key_lengths-column",
    "key_lengths-expanded",
    "key_lengths-int32-stepped",
    "key_mask-transposed",
    "key_mask-sliced",
    "key_mask-expanded",
    "mask-transposed",
    "mask-sliced",
    "mask-expanded-heads+causal",
]
SIDE_ARGS = {
    "key_lengths": ("KLEN", "s_klb"),
    "key_mask": ("KMASK", "s_kmb s_kmn"),
    "mask": ("MASK", "s_mb s_mh s_mm s_mn"),
}


@pytest.mark.one_block_shape
@pytest.mark.parametrize("kind", SIDE_INPUT_KINDS)
def test_side_inputs_in_any_layout(kind, device):
    """key_lengths, key_mask and mask given as non-contiguous, expanded or sliced views: out, lse, dq, dk, dv
    match float64, and every kernel got the very view (same memory) with its strides, not a copy."""
    batch, heads, q_len, k_len = 3, 2, 20, 40
    side = _side_inputs(kind, batch, heads, q_len, k_len, device)
    name = kind.split("-")[0]
    view = side[name]
    assert not view.is_contiguous()
    bases = [rand((batch, heads, n, 16), torch.float32, device) for n in (q_len, k_len, k_len, q_len)]
    ref, mine, (seen, _) = compare_on_views(bases, **side)
    pointer, stride_names = SIDE_ARGS[name]
    full = view if name != "mask" else torch.broadcast_to(view, (batch, heads, q_len, k_len))
    for kernel in ("_fwd_kernel", "_dkdv_kernel", "_dq_kernel"):
        args = launched(seen, kernel)
        assert args[pointer].data_ptr() == view.data_ptr(), (kernel, "a copy was passed")
        assert tuple(args[s] for s in stride_names.split()) == full.stride(), kernel


@pytest.mark.one_block_shape
@pytest.mark.parametrize("layout", ["expanded", "transposed"])
def test_logsumexp_gradient_in_any_layout(layout, device):
    """The gradient arriving at the logsumexp output may be expanded (from ``lse.sum()``) or laid out in any
    order (from a permuted use of lse): dq, dk, dv still match float64."""
    batch, heads, q_len, k_len = 2, 3, 20, 30
    g = torch.Generator().manual_seed(2)
    bases = [
        torch.randn(batch, heads, n, 16, generator=g, dtype=torch.float64).to(device) for n in (q_len, k_len, k_len)
    ]
    weights = torch.randn(q_len, heads, batch, generator=g, dtype=torch.float64).to(device)
    allowed = allowed_matrix(batch, heads, q_len, k_len, causal=True, device=device)

    def loss(out, lse):
        lse = lse.masked_fill(lse.isinf(), 0.0)
        if layout == "expanded":
            return out.sum() + lse.sum()
        return (out * out).sum() + (lse.permute(2, 1, 0) * weights.to(lse.dtype)).sum()

    grads = []
    for fn, dtype in (
        (lambda *x: attention(*x, allowed), torch.float64),
        (lambda *x: flash_attention_with_lse(*x, causal=True), torch.float32),
    ):
        leaves = [t.to(dtype, copy=True).requires_grad_() for t in bases]
        loss(*fn(*leaves)).backward()
        grads.append([t.grad for t in leaves])
    for name, mine, ref in zip(("dq", "dk", "dv"), *grads, strict=True):
        assert max_err(mine, ref) < 1e-4 * max(1.0, ref.abs().max().item()), name


# --- offsets past 2**31 inside one (batch, head): a row index times a row stride, computed in 32 bits, wraps
# around. The views below put rows 2**31 elements or more from their start without the memory: a large buffer
# that is allocated but never touched except where the views read (it is never resident).
@pytest.mark.one_block_shape
def test_dense_mask_offsets_past_2_31(device):
    """A dense mask whose query rows are 2**30 + 64 bytes apart: the last row's offset passes 2**31. A 32-bit
    offset wraps to 2**32 bytes earlier, where this buffer holds the opposite row, so a wrapped read shows."""
    if device == "cuda":
        pytest.skip("the interpreter reads host memory; the CUDA variant would need 4 GiB of device memory")
    batch, heads, q_len, k_len = 1, 2, 3, 24
    row_stride, start = 2**30 + 64, 2**31 - 64  # row 2 at start + 2**31 + 128; wrapped: start - 2**31 + 128
    buffer = torch.empty(start + 2 * row_stride + heads * k_len, dtype=torch.bool)  # 4 GiB, never resident
    mask = buffer.as_strided((batch, heads, q_len, k_len), (0, k_len, row_stride, 1), start)
    g = torch.Generator().manual_seed(4)
    values = torch.rand(batch, heads, q_len, k_len, generator=g) < 0.5
    values[..., 0] = True  # every row has an allowed key
    mask.copy_(values)
    wrapped = buffer.as_strided((heads, k_len), (k_len, 1), start + 2 * row_stride - 2**32)
    wrapped.copy_(~values[0, :, 2])
    assert mask[0, 1, 2, 5].item() == values[0, 1, 2, 5].item() and 2 * row_stride >= 2**31
    bases = [rand((batch, heads, n, 16), torch.float32, device) for n in (q_len, k_len, k_len, q_len)]
    compare_on_views(bases, mask=mask)


_FAR_ROWS = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from attention_reference import allowed_matrix, attention, max_err
from transformer.kernels import flash_attention_with_lse

q_len = k_len = 3
row_stride = 2**30 + 64  # elements: row 2 starts 2**31 + 128 elements (4 GiB of float16) after row 0
buffer = torch.empty(2 * row_stride + 64, dtype=torch.float16)  # 4 GiB, never resident
views = [buffer.as_strided((1, 1, 3, 16), (0, 0, row_stride, 1), 16 * i) for i in range(4)]  # q, k, v, grad_out
g = torch.Generator().manual_seed(0)
for view in views:
    view.copy_(torch.randn(1, 1, 3, 16, generator=g))
allowed = allowed_matrix(1, 1, q_len, k_len, causal=True)
results = []
for fn, dtype in ((lambda *x: attention(*x, allowed), torch.float64),
                  (lambda *x: flash_attention_with_lse(*x, causal=True), torch.float16)):
    leaves = [t.detach().to(dtype) if dtype == torch.float64 else t.detach() for t in views[:3]]
    for t in leaves:
        t.requires_grad_()
    out, lse = fn(*leaves)
    out.backward(views[3].to(dtype))
    results.append([out] + [t.grad for t in leaves])
print(max(max_err(a, b) for a, b in zip(*results)))
"""


@pytest.mark.one_block_shape
def test_row_offsets_past_2_31(device):
    """q, k, v and grad_out whose rows are 2**30 + 64 elements apart: the last row's element offset passes 2**31
    in the forward, delta, dK/dV and dQ kernels; out, dq, dk and dv match float64 (fp16 accuracy). Run in a
    subprocess: a wrapped 32-bit offset reads 8 GiB before the buffer, which may crash the process."""
    if device == "cuda":
        pytest.skip("the interpreter reads host memory; the CUDA variant would need 4 GiB of device memory")
    import os
    import subprocess
    import sys

    here = os.path.dirname(__file__)
    result = subprocess.run(
        [sys.executable, "-c", _FAR_ROWS, here],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert float(result.stdout.split()[-1]) < 5e-3, result.stdout
