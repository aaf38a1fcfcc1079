"""Comparing the fused kernel with a float64 reference: the FlashAttention error rule, on views of the inputs."""

import torch
from attention_reference import allowed_matrix, attention, max_err
from launch_capture import launched, launches
from philox_model import P

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


def assert_matches_dropout_reference(out, leaves, grad_out, exact, allowed, keep):
    """After ``out.backward(grad_out)``: ``out`` and the gradients of ``leaves`` equal float64 attention of ``exact``
    (the float64 q, k, v) with dropout's keep mask ``keep`` (probability philox_model.P), to 1e-5."""
    ref_leaves = [t.clone().requires_grad_() for t in exact]
    ref = attention(*ref_leaves, allowed, keep=keep, dropout_p=P)[0]
    ref.backward(grad_out.double())
    assert max_err(out, ref) < 1e-5
    for mine, theirs in zip(leaves, ref_leaves, strict=True):
        assert max_err(mine.grad, theirs.grad) < 1e-5


def run_and_compare(q, k, v, **masks):
    """compare_on_views on contiguous copies of q, k, v (and a random grad_out); returns (ref, mine)."""
    bases = [t.contiguous() for t in (q, k, v)] + [torch.randn_like(q).contiguous()]
    return compare_on_views(bases, **masks)[:2]


def rand(shape, dtype, device):
    return torch.randn(shape, dtype=dtype, device=device)


# --- block shapes: under the interpreter these run once per (BLOCK_M, BLOCK_N) in conftest.BLOCK_SHAPES
