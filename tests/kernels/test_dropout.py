"""Dropout on the attention probabilities: in-kernel Philox, reproducible per seed, same mask in backward."""

import pytest
import torch

from attention_reference import allowed_matrix, attention, max_err
from transformer.kernels import flash_attention, flash_attention_with_lse

P = 0.3


def recover_keep(batch, heads, q_len, k_len, seed, device, **masks):
    """The keep mask the kernel draws for these shapes and seed: q = 0 gives uniform probabilities
    1/k_len, and v = identity makes the output row equal the dropped probability row."""
    head_dim = max(16, k_len)
    q = torch.zeros(batch, heads, q_len, head_dim, device=device)
    k = torch.randn(batch, heads, k_len, head_dim, device=device)
    v = torch.eye(k_len, head_dim, device=device).expand(batch, heads, k_len, head_dim)
    out = flash_attention(q, k, v, dropout_p=P, seed=seed, **masks)[..., :k_len]
    return out * k_len * (1 - P) > 0.5


def test_same_seed_same_output_other_seed_differs(device):
    q, k, v = (torch.randn(1, 2, n, 32, device=device) for n in (40, 50, 50))
    a = flash_attention(q, k, v, dropout_p=P, seed=7)
    assert torch.equal(a, flash_attention(q, k, v, dropout_p=P, seed=7))
    assert not torch.equal(a, flash_attention(q, k, v, dropout_p=P, seed=8))
    assert not torch.equal(a, flash_attention(q, k, v))


def test_seed_none_follows_torch_manual_seed(device):
    q, k, v = (torch.randn(1, 1, n, 16, device=device) for n in (20, 20, 20))
    torch.manual_seed(3)
    a = flash_attention(q, k, v, dropout_p=P)
    b = flash_attention(q, k, v, dropout_p=P)
    torch.manual_seed(3)
    assert torch.equal(a, flash_attention(q, k, v, dropout_p=P))
    assert not torch.equal(a, b)


def test_keep_rate_and_scaling(device):
    keep = recover_keep(2, 2, 129, 64, seed=11, device=device)
    n = keep.numel()
    rate = keep.float().mean().item()
    assert abs(rate - (1 - P)) < 5 * ((P * (1 - P) / n) ** 0.5), rate
    # kept entries are exactly 1/(k_len (1 - p)), dropped ones exactly 0 (checked through the threshold)
    head_dim = 64
    q = torch.zeros(1, 1, 5, head_dim, device=device)
    v = torch.eye(64, head_dim, device=device)[None, None]
    out = flash_attention(q, torch.randn(1, 1, 64, head_dim, device=device), v, dropout_p=P, seed=1)
    values = set(torch.round(out * 64 * (1 - P), decimals=4).unique().tolist())
    assert values <= {0.0, 1.0}


@pytest.mark.parametrize("masks", [{}, {"causal": True, "key_lengths": [30, 0]}], ids=["none", "causal+lengths"])
def test_forward_and_backward_match_reference_with_recovered_mask(masks, device):
    batch, heads, q_len, k_len = 2, 2, 45, 37
    masks = {name: torch.tensor(val, device=device) if isinstance(val, list) else val for name, val in masks.items()}
    keep = recover_keep(batch, heads, q_len, k_len, seed=5, device=device, **masks)
    allowed = allowed_matrix(batch, heads, q_len, k_len, device=device, **masks)
    q, k, v = (torch.randn(batch, heads, n, 40, device=device, dtype=torch.float64) for n in (q_len, k_len, k_len))
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, dropout_p=P, seed=5, **masks)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = attention(*ref_leaves, allowed, keep=keep, dropout_p=P)[0]
    ref.backward(grad_out.double())
    assert max_err(out, ref) < 1e-5
    for mine, theirs in zip(leaves, ref_leaves):
        assert max_err(mine.grad, theirs.grad) < 1e-5
    assert max_err(out, attention(q, k, v, allowed)[0]) > 0.1  # dropout did change the output


def test_gradcheck_with_dropout_float64(device):
    if device == "cuda":
        pytest.skip("float64 runs only under the Triton interpreter")
    q, k, v = (torch.randn(1, 2, n, 16, device=device, dtype=torch.float64, requires_grad=True) for n in (6, 9, 9))
    assert torch.autograd.gradcheck(lambda *x: flash_attention(*x, dropout_p=P, seed=2, causal=True), (q, k, v),
                                    fast_mode=True)


def test_lse_ignores_dropout(device):
    q, k, v = (torch.randn(1, 2, n, 16, device=device) for n in (9, 12, 12))
    assert torch.equal(flash_attention_with_lse(q, k, v, dropout_p=P, seed=1)[1], flash_attention_with_lse(q, k, v)[1])
