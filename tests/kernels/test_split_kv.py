"""The split-KV (FlashDecoding) forward: short queries over long keys split the keys over several programs, and a
second kernel combines their partial outputs and logsumexps. The backward is the ordinary one (it needs only out
and lse), so the same checks as every other forward apply: out, lse, dq, dk, dv against float64."""

import pytest
import torch
from attention_reference import allowed_matrix, max_err
from kernel_compare import assert_matches_dropout_reference, compare_on_views, rand
from launch_capture import launched, launches
from philox_model import P, model_keep

from transformer.kernels import _grid, _tuning, flash_attention, flash_attention_with_lse

SPLIT = ("_fwd_kernel", "_combine_kernel")


@pytest.mark.one_block_shape
def test_split_rule():
    """FlashAttention-2's rule at H100 sizes (132 SMs, 128-key granularity): one sequence of 32 heads decoding
    over 32k keys takes 4 splits of 8192 keys; 2048 x 32 heads (a full GPU) and 65 queries do not split; nor do
    keys that fit one split; a split count fills at least 85 % of the best wave efficiency."""
    assert _grid.kv_splits(32, 1, 32768, 132, 128) == (4, 8192)
    assert _grid.kv_splits(2048 * 32, 1, 32768, 132, 128) == (1, 32768)
    # the rule's edge: 106 one-block programs fill 80 % of 132 SMs (no split), 105 do not (the wave rule splits)
    assert _grid.kv_splits(106, 1, 32768, 132, 128) == (1, 32768)
    assert _grid.kv_splits(105, 1, 32768, 132, 128)[0] > 1
    assert _grid.kv_splits(1, 65, 32768, 132, 128) == (1, 32768)
    assert _grid.kv_splits(1, 64, 32768, 132, 128)[0] > 1  # 64 queries (one 64-row block) still split: q_len <= 64
    assert _grid.kv_splits(1, 1, 128, 132, 128) == (1, 128)
    assert _grid.kv_splits(8, 16, 1000, 132, 128) == (8, 128)  # 8 programs x 8 splits: 64 of 132 SMs, the most
    splits, keys = _grid.kv_splits(2, 1, 300, 132, 128)
    assert (splits, keys) == (3, 128) and (splits - 1) * keys < 300 <= splits * keys
    assert _grid.split_plan(1000, 3, 128) == (3, 384)


@pytest.mark.one_block_shape
def test_the_launcher_splits_short_queries_over_long_keys():
    """Recorded launches (not run): decoding with few (batch, head) pairs over a long cache takes the split path,
    with a grid of one program per (pair, query block, split); many pairs do not."""
    q, k, v = (torch.randn(1, 4, n, 16) for n in (1, 1000, 1000))
    with launches(run=False) as seen:
        flash_attention(q, k, v)
    assert [name for name, _ in seen] == list(SPLIT)
    split = launched(seen, "_fwd_kernel")
    assert split["SPLIT"] and split["n_splits"] == 8 and split["split_keys"] == 128
    assert split["grid"] == (4 * 8, 1, 1)
    assert launched(seen, "_combine_kernel")["grid"] == (4, 1, 1)
    q, k, v = (torch.randn(64, 4, n, 16) for n in (1, 1000, 1000))
    with launches(run=False) as seen:
        flash_attention(q, k, v)
    assert [name for name, _ in seen] == ["_fwd_kernel"] and not launched(seen, "_fwd_kernel")["SPLIT"]


CASES = {  # name: (q_len, masks)
    "plain": (1, {}),
    "key_lengths": (3, {"key_lengths": [300, 100]}),  # batch row 1: its last split sees no key
    "causal": (5, {"causal": True}),  # top-left: only the first split has allowed keys
    "mask+key_mask": (2, {"mask": "random", "key_mask": "random"}),
}


@pytest.mark.parametrize("case", CASES)
def test_split_forward_and_gradients_match_float64(case, device):
    """Out, lse, dq, dk, dv of the split path (3 splits of 128 keys, the last one partial) against float64,
    with each mask kind; the forward really split."""
    q_len, masks = CASES[case]
    batch, heads, k_len = 2, 2, 300
    g = torch.Generator().manual_seed(3)
    for name, value in list(masks.items()):
        if value == "random":
            shape = (batch, k_len) if name == "key_mask" else (batch, heads, q_len, k_len)
            masks[name] = (torch.rand(shape, generator=g) < 0.7).to(device)
        elif isinstance(value, list):
            masks[name] = torch.tensor(value, device=device)
    bases = [rand((batch, heads, n, 16), torch.float32, device) for n in (q_len, k_len, k_len, q_len)]
    with _tuning.force_kv_splits(3):
        _, _, (seen, _) = compare_on_views(bases, forward_kernels=SPLIT, **masks)
    assert launched(seen, "_fwd_kernel")["n_splits"] == 3


def test_split_dropout_uses_the_same_mask(device):
    """With dropout the split forward (splits of 128, 128 and 4 keys) draws the model's mask (the same as the
    one-pass forward), and the gradients match float64 attention with that mask."""
    batch, heads, q_len, k_len = 1, 2, 4, 260
    g = torch.Generator().manual_seed(8)
    q, k, v, grad = (
        torch.randn(batch, heads, n, 16, generator=g, dtype=torch.float64).to(device)
        for n in (q_len, k_len, k_len, q_len)
    )
    keep = model_keep(9, batch, heads, q_len, k_len).to(device)
    allowed = allowed_matrix(batch, heads, q_len, k_len, device=device)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    with _tuning.force_kv_splits(3), launches() as seen:
        out = flash_attention(*leaves, dropout_p=P, seed=9)
    assert launched(seen, "_fwd_kernel")["n_splits"] == 3
    out.backward(grad.float())
    assert_matches_dropout_reference(out, leaves, grad, (q, k, v), allowed, keep)
    with _tuning.force_kv_splits(1):
        assert max_err(out, flash_attention(*leaves, dropout_p=P, seed=9)) < 1e-6


@pytest.mark.one_block_shape
def test_split_and_one_pass_agree_in_float64(device):
    """In float64 the two forwards differ only by rounding (1e-15), also for rows without any allowed key."""
    if device == "cuda":
        pytest.skip("float64 runs only under the Triton interpreter")
    q, k, v = (torch.randn(2, 2, n, 16, dtype=torch.float64) for n in (3, 400, 400))
    lengths = torch.tensor([0, 390])
    with _tuning.force_kv_splits(4):
        split = flash_attention_with_lse(q, k, v, key_lengths=lengths)
    with _tuning.force_kv_splits(1):
        single = flash_attention_with_lse(q, k, v, key_lengths=lengths)
    assert max_err(split[0], single[0]) < 1e-14
    assert torch.equal(split[1].isinf(), single[1].isinf()) and split[1][0].isinf().all()
    assert max_err(split[1].nan_to_num(neginf=0), single[1].nan_to_num(neginf=0)) < 1e-14
