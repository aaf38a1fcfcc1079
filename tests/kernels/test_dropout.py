"""Dropout on the attention probabilities: in-kernel Philox, reproducible per seed, same mask in backward.

The keep mask is checked against an independent model of the stream (``philox_model.py``: ``philox4x32`` and
``model_keep``, written from triton/language/random.py and the layout documented in kernels/_common.py
``keep_block``: one Philox-4x32 call per query row and group of 8 keys, 8 decisions of 16 bits each), and for
independence across heads, batch rows, query rows and keys.
"""

import pytest
import torch
from attention_reference import allowed_matrix, attention, max_err
from kernel_compare import assert_matches_dropout_reference
from philox_model import P, model_bits, model_keep

from transformer.kernels import flash_attention, flash_attention_with_lse

AGREE = P**2 + (1 - P) ** 2  # chance that two independent keep decisions agree


def recover_keep(batch, heads, q_len, k_len, seed, device, p=P, **masks):
    """The keep mask the kernel draws for these shapes and seed: q = 0 gives uniform probabilities
    1/k_len, and v = identity makes the output row equal the dropped probability row. (Draws nothing from torch's
    generators: with seed=None the kernel's draw is the only one.)"""
    head_dim = max(16, k_len)
    q = torch.zeros(batch, heads, q_len, head_dim, device=device)
    k = torch.randn(batch, heads, k_len, head_dim, generator=torch.Generator().manual_seed(0)).to(device)
    v = torch.eye(k_len, head_dim, device=device).expand(batch, heads, k_len, head_dim)
    out = flash_attention(q, k, v, dropout_p=p, seed=seed, **masks)[..., :k_len]
    return out * k_len * (1 - p) > 0.5


def test_keep_mask_is_philox_of_the_element_index(device):
    """The mask the forward draws is exactly the model's (one Philox call per query row and 8 keys, both 32-bit
    halves of the 64-bit seed as its key, offset 0 for an explicit seed), for the block shape in use: k_len 70 is
    no multiple of 8, so the last group of keys is partly padding."""
    batch, heads, q_len, k_len, seed = 2, 2, 100, 70, 0x0123456789ABCDEF
    expected = model_keep(seed, batch, heads, q_len, k_len)
    assert abs(expected.float().mean().item() - (1 - P)) < 0.02  # the model itself drops about p
    assert torch.equal(recover_keep(batch, heads, q_len, k_len, seed=seed, device=device).cpu(), expected)


@pytest.mark.one_block_shape
def test_seed_none_draws_seed_and_offset_from_torchs_generator(device):
    """seed=None: the (seed, offset) pair is one torch.randint of two int64 on q's device (torch's generator of
    that device, as inductor seeds its random kernels), and the mask is the model's for that pair, offset
    included; the generator advances by that draw and nothing else."""
    generator_seed = 1234
    torch.manual_seed(generator_seed)
    seed, offset = torch.randint(-(2**63), 2**63 - 1, (2,), dtype=torch.int64, device=device).tolist()
    after = torch.rand(3, device=device)
    assert offset % 2**64 >= 2**32  # the offset's high half is exercised too (true for this generator seed)
    torch.manual_seed(generator_seed)
    keep = recover_keep(1, 2, 30, 40, seed=None, device=device).cpu()
    assert torch.equal(torch.rand(3, device=device), after)
    assert torch.equal(keep, model_keep(seed, 1, 2, 30, 40, offset=offset))
    assert not torch.equal(keep, model_keep(seed, 1, 2, 30, 40))


@pytest.mark.one_block_shape
@pytest.mark.parametrize("seed", [0, 5, -7, 2**63 - 1, 2**64 - 7])
def test_keep_mask_is_philox_for_other_seeds(seed, device):
    """As above for seeds with no high bits, negative ones and those past int64 (taken modulo 2**64: -7 and
    2**64 - 7 are one seed) and the largest int64."""
    expected = model_keep(seed, 1, 2, 33, 40)
    assert torch.equal(recover_keep(1, 2, 33, 40, seed=seed, device=device).cpu(), expected)


def _shifted_copies(lines: torch.Tensor, min_overlap: int) -> list:
    """Every (i, j, s) with lines[i, s:] == lines[j, :L - s] over at least ``min_overlap`` positions (for s = 0
    only i != j: two equal lines). Independent draws agree on 32 positions with chance (p^2 + (1-p)^2)^32,
    below 3e-8."""
    a = lines.float()
    length = lines.shape[1]
    found = []
    for s in range(length - min_overlap + 1):
        x, y = a[:, s:], a[:, : length - s]
        agree = x @ y.T + (1 - x) @ (1 - y).T
        equal = agree == length - s
        if s == 0:
            equal.fill_diagonal_(False)
        found += [(i, j, s) for i, j in equal.nonzero().tolist()]
    return found


def _assert_agree_at_chance(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Two keep masks agree on about p^2 + (1-p)^2 of their entries, as independent draws do (5 sigma)."""
    rate = (a == b).float().mean().item()
    sigma = (AGREE * (1 - AGREE) / a.numel()) ** 0.5
    assert abs(rate - AGREE) < 5 * sigma, f"{what}: agreement {rate:.4f}, independent draws give {AGREE:.4f}"


@pytest.mark.parametrize("q_len,k_len", [(40, 100), (100, 40)])
def test_keep_decisions_are_independent_across_heads_batch_queries_and_keys(q_len, k_len, device):
    """No two heads or batch rows share a mask, and any two of them agree only at chance; no query row (over
    every batch row and head) repeats another, even shifted; no key column does; neighbouring rows and
    columns agree only at chance. (An offset formula that forgot the head, used q_len for k_len or the
    reverse, or swapped the query and key indices makes copies that these find.)"""
    batch, heads = 2, 3
    keep = recover_keep(batch, heads, q_len, k_len, seed=21, device=device).cpu()
    slices = keep.reshape(batch * heads, q_len, k_len)  # (batch, head) pairs
    for i in range(batch * heads):
        for j in range(i):
            _assert_agree_at_chance(
                slices[i], slices[j], f"(batch, head) slices {divmod(i, heads)} and {divmod(j, heads)}"
            )
    _assert_agree_at_chance(keep[..., 1:, :], keep[..., :-1, :], "neighbouring query rows")
    _assert_agree_at_chance(keep[..., 1:], keep[..., :-1], "neighbouring keys")
    rows = keep.reshape(-1, k_len)
    columns = keep.transpose(-2, -1).reshape(-1, q_len)
    assert _shifted_copies(rows, 32) == [], "query rows repeat (index, index, shift)"
    assert _shifted_copies(columns, 32) == [], "key columns repeat (index, index, shift)"


@pytest.mark.one_block_shape
def test_keep_threshold_is_floor_of_p_times_65536(device):
    """A key is kept when its 16 bits are at least floor(p * 65536): with p just above t / 65536 (t one element's
    bits) that element is kept, with p = (t + 1) / 65536 it is dropped; a p below 2**-16 drops nothing."""
    bits = model_bits(4, 1, 1, 16, 16)
    t = int(bits[0, 0, 3, 5])
    assert 0 < t < 65535
    for p, kept in (((t + 0.5) / 65536, True), ((t + 1) / 65536, False)):
        keep = recover_keep(1, 1, 16, 16, seed=4, device=device, p=p).cpu()
        assert keep[0, 0, 3, 5].item() is kept
        assert torch.equal(keep, model_keep(4, 1, 1, 16, 16, p=p))
    assert recover_keep(1, 1, 16, 16, seed=4, device=device, p=1e-6).all()


@pytest.mark.one_block_shape
def test_both_halves_of_the_64_bit_seed_key_the_stream(device):
    """Seeds that differ only in their high 32 bits (seed=None draws from [0, 2**62)) give independent masks."""
    low = recover_keep(1, 2, 40, 50, seed=5, device=device)
    for seed in (5 + 2**32, 5 + 2**61):
        _assert_agree_at_chance(low, recover_keep(1, 2, 40, 50, seed=seed, device=device), f"seeds 5 and {seed}")


@pytest.mark.one_block_shape
def test_same_seed_same_output_other_seed_differs(device):
    q, k, v = (torch.randn(1, 2, n, 32, device=device) for n in (40, 50, 50))
    a = flash_attention(q, k, v, dropout_p=P, seed=7)
    assert torch.equal(a, flash_attention(q, k, v, dropout_p=P, seed=7))
    assert not torch.equal(a, flash_attention(q, k, v, dropout_p=P, seed=8))
    assert not torch.equal(a, flash_attention(q, k, v))


@pytest.mark.one_block_shape
def test_seed_none_follows_torch_manual_seed(device):
    q, k, v = (torch.randn(1, 1, n, 16, device=device) for n in (20, 20, 20))
    torch.manual_seed(3)
    a = flash_attention(q, k, v, dropout_p=P)
    b = flash_attention(q, k, v, dropout_p=P)
    torch.manual_seed(3)
    assert torch.equal(a, flash_attention(q, k, v, dropout_p=P))
    assert not torch.equal(a, b)


@pytest.mark.one_block_shape
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


@pytest.mark.parametrize("masks", [{}, {"causal": True, "key_lengths": [60, 0]}], ids=["none", "causal+lengths"])
def test_forward_and_backward_use_the_philox_mask(masks, device):
    """Out, dq, dk and dv equal float64 attention with the model's keep mask: the forward, the dQ kernel and
    the (key-major) dK/dV kernel all draw the same mask, for the block shape in use."""
    batch, heads, q_len, k_len = 2, 1, 100, 70
    masks = {name: torch.tensor(val, device=device) if isinstance(val, list) else val for name, val in masks.items()}
    keep = model_keep(5, batch, heads, q_len, k_len).to(device)
    allowed = allowed_matrix(batch, heads, q_len, k_len, device=device, **masks)
    assert torch.equal(recover_keep(batch, heads, q_len, k_len, seed=5, device=device, **masks), keep & allowed)
    q, k, v = (torch.randn(batch, heads, n, 40, device=device, dtype=torch.float64) for n in (q_len, k_len, k_len))
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, dropout_p=P, seed=5, **masks)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    assert_matches_dropout_reference(out, leaves, grad_out, (q, k, v), allowed, keep)
    assert max_err(out, attention(q, k, v, allowed)[0]) > 0.1  # dropout did change the output


@pytest.mark.one_block_shape
def test_gradcheck_with_dropout_float64(device):
    if device == "cuda":
        pytest.skip("float64 runs only under the Triton interpreter")
    q, k, v = (torch.randn(1, 2, n, 16, device=device, dtype=torch.float64, requires_grad=True) for n in (6, 9, 9))
    assert torch.autograd.gradcheck(
        lambda *x: flash_attention(*x, dropout_p=P, seed=2, causal=True), (q, k, v), fast_mode=True
    )


@pytest.mark.one_block_shape
def test_lse_ignores_dropout(device):
    q, k, v = (torch.randn(1, 2, n, 16, device=device) for n in (9, 12, 12))
    assert torch.equal(flash_attention_with_lse(q, k, v, dropout_p=P, seed=1)[1], flash_attention_with_lse(q, k, v)[1])
