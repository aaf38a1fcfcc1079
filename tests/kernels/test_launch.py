"""Launch arithmetic, tested as functions and on recorded launches (nothing here needs the kernels to run):
grids within CUDA's limits, the support check's launch limits."""

import pytest
import torch
from launch_capture import launches

from transformer.kernels import _grid, flash_attention, unsupported_reason

CUDA_AXIS_0, CUDA_AXIS_YZ = 2**31 - 1, 65535


def test_blocks_grid_is_one_axis_of_blocks_times_pairs_times_splits():
    assert _grid.blocks_grid(1, 16, 2048 * 32) == (65536, 1, 1)
    assert _grid.blocks_grid(100, 32, 6) == (24, 1, 1)  # 4 blocks of 32 rows (the last one partial) x 6 pairs
    assert _grid.blocks_grid(96, 32, 6) == (18, 1, 1)
    assert _grid.blocks_grid(100, 32, 6, splits=3) == (72, 1, 1)


@pytest.mark.parametrize(
    "batch,heads,q_len,k_len", [(2048, 32, 1, 3), (70000, 1, 40, 33)], ids=["decode-2048x32", "batch-70000-q40"]
)
def test_every_launch_fits_cuda_grid_limits(batch, heads, q_len, k_len):
    """Large-batch decoding (2048 x 32 heads = 65536 (batch, head) pairs, one more than CUDA's grid axes 1 and 2
    take): the forward, delta, dK/dV and dQ launches (recorded, not run) all fit CUDA's grid limits and launch
    one program per (batch, head) pair and block of their rows."""
    q = torch.randn(batch, heads, q_len, 16, requires_grad=True)
    k, v = (torch.randn(batch, heads, k_len, 16, requires_grad=True) for _ in range(2))
    with launches(run=False) as seen:
        out = flash_attention(q, k, v, causal=True)
        out.backward(torch.ones_like(out))
    assert [name for name, _ in seen] == ["_fwd_kernel", "_delta_kernel", "_dkdv_kernel", "_dq_kernel"]
    for name, args in seen:
        grid = args["grid"]
        assert grid[0] <= CUDA_AXIS_0 and grid[1] <= CUDA_AXIS_YZ and grid[2] <= CUDA_AXIS_YZ, (name, grid)
        length, block = (k_len, args["BLOCK_N"]) if name == "_dkdv_kernel" else (q_len, args["BLOCK_M"])
        assert grid[0] * grid[1] * grid[2] == -(-length // block) * batch * heads, (name, grid)


def _expanded(batch, heads, q_len, k_len):
    """q, k, v of these sizes without memory: stride-0 views of one row."""
    return (torch.zeros(1, 1, 1, 16).expand(batch, heads, n, 16) for n in (q_len, k_len, k_len))


def test_unsupported_reason_declines_what_no_launch_can_take():
    """More programs than CUDA's 2**31 - 1 (with the smallest block any launch uses, 16 rows), or lengths past
    32-bit row indices: declined with a sentence (so `auto` falls back) and refused by flash_attention; one block
    fewer is accepted."""
    pairs = 2**27  # batch x heads
    q, k, v = _expanded(2**17, 2**10, 16 * 16, 16)  # 16 query blocks of 16 rows x 2**27 pairs = 2**31 programs
    reason = unsupported_reason(q, k, v)
    assert reason is not None and f"up to {16 * pairs} programs" in reason and "2147483647" in reason
    with pytest.raises(RuntimeError, match="more than CUDA's grid limit"):
        flash_attention(q, k, v)
    assert unsupported_reason(*_expanded(2**17, 2**10, 15 * 16, 16)) is None
    assert "the kernels index rows with 32-bit integers" in unsupported_reason(*_expanded(1, 1, 2**31, 16))
    assert "got q_len=16, k_len=2147483648" in unsupported_reason(*_expanded(1, 1, 16, 2**31))
