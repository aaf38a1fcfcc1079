"""Grouped-query and multi-query attention in the kernels: k and v with kv_heads heads dividing q's heads, read in
place; q head h uses kv head h // (heads // kv_heads) (torch's enable_gqa, i.e. repeat_interleave), and the backward
sums dK and dV over each group (in one program per kv head and key block, no atomics)."""

import pytest
import torch
import torch.nn.functional as F
from attention_reference import allowed_matrix, attention, max_err
from kernel_compare import compare_on_views, rand
from launch_capture import launched, launches
from philox_model import P, model_keep

from transformer.kernels import _tuning, flash_attention, flash_attention_with_lse, unsupported_reason

HEADS = 8


def _masks(batch, q_len, k_len, device):
    """causal + key_lengths + a dense mask that differs per query head (so reading it per kv head shows)."""
    g = torch.Generator().manual_seed(6)
    return {
        "causal": True,
        "key_lengths": torch.tensor([k_len, k_len - 9], device=device),
        "mask": (torch.rand(batch, HEADS, q_len, k_len, generator=g) < 0.75).to(device),
    }


@pytest.mark.parametrize("kv_heads", [8, 4, 2, 1], ids=["ratio1", "ratio2", "ratio4", "mqa-ratio8"])
def test_gqa_forward_and_gradients_match_float64(kv_heads, device):
    """out, lse, dq, dk, dv against float64 attention on k and v repeated per group, with every mask kind; the
    kernels read k and v as given (kv_heads heads, same memory), and dK/dV launches one program per kv head."""
    batch, q_len, k_len = 2, 20, 33
    bases = [rand((batch, HEADS, q_len, 16), torch.float32, device)]
    bases += [rand((batch, kv_heads, k_len, 16), torch.float32, device) for _ in range(2)]
    bases.append(rand((batch, HEADS, q_len, 16), torch.float32, device))
    ref, mine, (seen, given) = compare_on_views(bases, **_masks(batch, q_len, k_len, device))
    for kernel in ("_fwd_kernel", "_dkdv_kernel", "_dq_kernel"):
        args = launched(seen, kernel)
        for name in ("K", "V"):
            assert args[name].data_ptr() == given[name].data_ptr() and args[name].shape[1] == kv_heads, kernel
        assert args["group"] == HEADS // kv_heads
    dkdv = launched(seen, "_dkdv_kernel")
    shares = _tuning.group_splits(batch, kv_heads, HEADS // kv_heads, k_len, given["K"].device)
    assert dkdv["grid"][0] == -(-k_len // dkdv["BLOCK_N"]) * batch * kv_heads * shares
    assert dkdv["group_splits"] == shares
    assert mine[2][1].shape == (batch, kv_heads, k_len, 16)


def test_gqa_matches_torch_enable_gqa(device):
    """The grouping is torch's: F.scaled_dot_product_attention(enable_gqa=True) in float64 gives the same."""
    if device == "cuda":
        pytest.skip("float64 runs only under the Triton interpreter")
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, HEADS, 9, 16, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 12, 16, generator=g, dtype=torch.float64) for _ in range(2))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert max_err(flash_attention(q, k, v, causal=True), expected) < 1e-6
    assert max_err(flash_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), causal=True), expected) > 0.1


def test_gqa_dropout_draws_the_query_heads_masks(device):
    """With dropout each query head draws its own mask (the model's, by query head), forward and backward."""
    batch, kv_heads, q_len, k_len = 1, 2, 24, 40
    g = torch.Generator().manual_seed(5)
    q, grad = (torch.randn(batch, HEADS, q_len, 16, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    k, v = (torch.randn(batch, kv_heads, k_len, 16, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    keep = model_keep(3, batch, HEADS, q_len, k_len).to(device)
    allowed = allowed_matrix(batch, HEADS, q_len, k_len, causal=True, device=device)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, causal=True, dropout_p=P, seed=3)
    out.backward(grad.float())
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    attention(*ref_leaves, allowed, keep=keep, dropout_p=P)[0].backward(grad)
    assert max_err(out, attention(q, k, v, allowed, keep=keep, dropout_p=P)[0]) < 1e-5
    for mine, theirs in zip(leaves, ref_leaves, strict=True):
        assert max_err(mine.grad, theirs.grad) < 1e-5


def test_gqa_split_kv(device):
    """Decoding with grouped-query attention over a long cache takes the split path and stays exact."""
    batch, heads, kv_heads, k_len = 2, 4, 1, 260
    bases = [rand((batch, heads, 1, 16), torch.float32, device)]
    bases += [rand((batch, kv_heads, k_len, 16), torch.float32, device) for _ in range(2)]
    bases.append(rand((batch, heads, 1, 16), torch.float32, device))
    with _tuning.force_kv_splits(3):
        _, _, (seen, _) = compare_on_views(
            bases,
            key_lengths=torch.tensor([260, 200], device=device),
            forward_kernels=("_fwd_kernel", "_combine_kernel"),
        )
    assert launched(seen, "_fwd_kernel")["n_splits"] == 3 and launched(seen, "_fwd_kernel")["group"] == 4


def test_gqa_is_supported_and_recorded_launches_fit(device):
    """unsupported_reason accepts kv heads that divide the query heads; the grid limit counts kv heads for dK/dV."""
    q = torch.zeros(1, 1, 1, 16).expand(2, HEADS, 4, 16)
    k = torch.zeros(1, 1, 1, 16).expand(2, 2, 4, 16)
    assert unsupported_reason(q, k, k) is None
    q, k, v = (t.to(device) for t in (torch.randn(1, HEADS, 5, 16), torch.randn(1, 1, 7, 16), torch.randn(1, 1, 7, 16)))
    with launches(run=False) as seen:
        flash_attention_with_lse(q, k, v)
    assert launched(seen, "_fwd_kernel")["grid"][0] == HEADS * -(-5 // launched(seen, "_fwd_kernel")["BLOCK_M"])


def test_group_split_rule_fills_the_device():
    """dK/dV under GQA: one program per (batch, kv head, key block of 128) leaves an H100 (132 SMs) mostly idle for
    MQA at batch 1; the group is split in the fewest shares (a divisor of the group) that give 132 programs."""
    from transformer.kernels import _grid

    assert _grid.group_splits(1, 1, 32, 4096, 132, 128) == 8  # 32 key blocks x 8 shares = 256 programs
    assert _grid.group_splits(1, 8, 4, 4096, 132, 128) == 1  # 256 programs already
    assert _grid.group_splits(1, 1, 1, 4096, 132, 128) == 1  # no group: nothing to split
    assert _grid.group_splits(1, 2, 6, 1000, 132, 128) == 6  # 16 programs: even the whole group leaves SMs idle
    assert _grid.group_splits(2, 1, 12, 2048, 132, 128) == 6  # 32 programs: 4 would give 128 < 132


@pytest.mark.parametrize("shares", [1, 2, 4])
def test_split_group_gradients_match_and_are_deterministic(shares, device):
    """The dK/dV kernel with the group of 4 query heads split in ``shares`` programs (partial sums in float32,
    summed by the launcher in a fixed order): the gradients match float64 and repeat bitwise."""
    batch, q_len, k_len = 2, 20, 33
    bases = [rand((batch, HEADS, q_len, 16), torch.float32, device)]
    bases += [rand((batch, 2, k_len, 16), torch.float32, device) for _ in range(2)]
    bases.append(rand((batch, HEADS, q_len, 16), torch.float32, device))
    with _tuning.force_group_splits(shares):
        ref, mine, (seen, _) = compare_on_views(bases, **_masks(batch, q_len, k_len, device))
        assert launched(seen, "_dkdv_kernel")["group_splits"] == shares
        q, k, v, grad = (b.clone().requires_grad_() for b in bases)
        runs = [
            torch.autograd.grad(flash_attention(q, k, v, causal=True, dropout_p=0.2, seed=4), (q, k, v), grad)
            for _ in range(2)
        ]
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
