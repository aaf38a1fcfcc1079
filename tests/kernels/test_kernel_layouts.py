"""The fused kernel reads its inputs through their strides: non-contiguous, expanded and transposed q, k, v,
grad_out, masks and key lengths, and offsets past 2**31, against a float64 reference (the FlashAttention rule)."""

import pytest
import torch
from attention_reference import allowed_matrix, attention, max_err
from kernel_compare import compare_on_views, rand
from launch_capture import launched

from transformer.kernels import flash_attention_with_lse


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

    def loss(out, lse):  # no row is fully masked (causal, q_len <= k_len): lse is finite and its gradient reaches
        # the kernel in the loss's layout (a masked_fill here would hand it a fresh contiguous gradient instead)
        assert torch.isfinite(lse).all()
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
