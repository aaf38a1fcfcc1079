"""The kernel under functorch transforms (docs/kernels.md, "Host cost per call" and "Functorch transforms"):
torch.func.vjp / grad / jacrev / vmap and batched gradients (gradcheck's check_batched_grad) give the reference's
values; forward-mode AD and a second derivative raise."""

import pytest
import torch

from transformer.kernels import flash_attention


def _reference(q, k, v, causal=True):
    scores = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5
    if causal:
        allowed = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def _kernel(q, k, v):
    return flash_attention(q, k, v, causal=True)


def _inputs(*lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*lead, 1, 2, n, 16, generator=g) for n in (5, 7, 7)]


def test_vjp_and_grad_give_the_references_gradients():
    q, k, v = _inputs()
    cotangent = torch.randn(1, 2, 5, 16, generator=torch.Generator().manual_seed(1))
    ours = torch.func.vjp(_kernel, q, k, v)[1](cotangent)
    theirs = torch.func.vjp(_reference, q, k, v)[1](cotangent)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    loss = lambda f: lambda q: f(q, k, v).pow(2).sum()  # noqa: E731
    torch.testing.assert_close(torch.func.grad(loss(_kernel))(q), torch.func.grad(loss(_reference))(q))


def test_jacrev_gives_the_references_jacobian():
    q, k, v = (t[:, :1, :2, :] for t in _inputs())  # 32 columns: one vmapped backward per column
    torch.testing.assert_close(
        torch.func.jacrev(lambda k: _kernel(q, k, v))(k), torch.func.jacrev(lambda k: _reference(q, k, v))(k)
    )


@pytest.mark.parametrize("in_dims", [(0, 0, 0), (0, None, None), (None, 1, 1)])
def test_vmap_runs_each_slice_as_the_kernel(in_dims):
    q, k, v = _inputs(3)
    if in_dims[0] is None:
        q = q[0]
    if in_dims[1] == 1:
        k, v = k.movedim(0, 1), v.movedim(0, 1)
    if in_dims[1] is None:
        k, v = k[0], v[0]
    torch.testing.assert_close(
        torch.func.vmap(_kernel, in_dims=in_dims)(q, k, v), torch.func.vmap(_reference, in_dims=in_dims)(q, k, v)
    )


def test_batched_gradients_and_gradcheck_with_check_batched_grad():
    q, k, v = _inputs()
    grads = torch.randn(4, 1, 2, 5, 16, generator=torch.Generator().manual_seed(2))
    leaf = q.clone().requires_grad_()
    ours = torch.autograd.grad(_kernel(leaf, k, v), leaf, grads, is_grads_batched=True)[0]
    leaf = q.clone().requires_grad_()
    theirs = torch.autograd.grad(_reference(leaf, k, v), leaf, grads, is_grads_batched=True)[0]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    small = [t[:, :1, :2, :].clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        _kernel, small, eps=1e-2, atol=5e-2, rtol=5e-2, check_batched_grad=True, fast_mode=True
    )


def test_vmap_with_dropout_follows_vmaps_randomness_modes():
    q, k, v = _inputs(2)
    same = [q[0], q[0]]
    attend = lambda q: flash_attention(q, k[0], v[0], dropout_p=0.5, seed=3)  # noqa: E731
    with pytest.raises(RuntimeError, match="randomness"):
        torch.func.vmap(attend)(torch.stack(same))
    out = torch.func.vmap(attend, randomness="same")(torch.stack(same))
    assert torch.equal(out[0], out[1])
    out = torch.func.vmap(attend, randomness="different")(torch.stack(same))
    assert not torch.equal(out[0], out[1])


def test_forward_mode_ad_and_a_second_derivative_raise():
    q, k, v = _inputs()
    with pytest.raises((NotImplementedError, RuntimeError), match="jvp|forward"):
        torch.func.jvp(_kernel, (q, k, v), (q, k, v))
    with pytest.raises(RuntimeError):
        torch.func.grad(lambda q: torch.func.grad(lambda q: _kernel(q, k, v).sum())(q).sum())(q)
