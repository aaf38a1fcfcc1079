"""Launch configuration: autotuning on CUDA, one fixed configuration under TRITON_INTERPRET=1.

Autotuning with more than one config touches the driver, which does not exist without a GPU. The interpreter's
block shape is 32 x 32 unless changed with :func:`interpret_blocks` (a context manager) or
:func:`set_interpret_blocks`, so that tests can run the kernels' block-shape-dependent logic (BLOCK_M != BLOCK_N)
on the CPU. It has no effect on CUDA, where the autotuner picks the blocks.
"""

import contextlib
import os

import torch
import triton

from . import _grid

INTERPRET_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32}  # the default interpreter block shape
_interpret_blocks = dict(INTERPRET_BLOCKS)  # the current one (read at each launch)
BLOCK_SIZES = (16, 32, 64, 128)  # tl.dot needs at least 16 rows and columns


def get_interpret_blocks() -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) that kernels launched under TRITON_INTERPRET=1 use now."""
    return _interpret_blocks["BLOCK_M"], _interpret_blocks["BLOCK_N"]


def set_interpret_blocks(block_m: int, block_n: int) -> tuple[int, int]:
    """Use (BLOCK_M, BLOCK_N) for every later interpreted launch (forward, dK/dV and dQ kernels); returns the
    previous shape. Each must be one of BLOCK_SIZES. Ignored on CUDA (autotuned there)."""
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value not in BLOCK_SIZES:
            raise ValueError(f"{name} must be one of {BLOCK_SIZES}, got {value!r}")
    previous = get_interpret_blocks()
    _interpret_blocks.update(BLOCK_M=block_m, BLOCK_N=block_n)
    return previous


@contextlib.contextmanager
def interpret_blocks(block_m: int, block_n: int):
    """Context manager: interpreted launches inside it use (BLOCK_M, BLOCK_N); the previous shape comes back
    on exit, also after an exception."""
    previous = set_interpret_blocks(block_m, block_n)
    try:
        yield
    finally:
        set_interpret_blocks(*previous)


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (read at call time, not import time)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _configs(pairs):
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
        for (m, n, w, s) in pairs
    ]


# (BLOCK_M, BLOCK_N, num_warps, num_stages); the small last one always fits in shared memory.
FWD_CONFIGS = _configs([(128, 64, 8, 3), (128, 128, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3), (64, 32, 4, 2), (32, 32, 4, 1)])
DKDV_CONFIGS = _configs([(32, 128, 8, 2), (64, 128, 8, 2), (32, 64, 4, 2), (64, 64, 4, 2), (16, 32, 4, 1)])
DQ_CONFIGS = _configs([(128, 32, 8, 2), (128, 64, 8, 2), (64, 64, 4, 2), (64, 32, 4, 2), (32, 16, 4, 1)])
# the split-KV forward (short queries: 16-row query blocks first; long key blocks)
SPLIT_CONFIGS = _configs([(16, 128, 4, 3), (16, 64, 4, 3), (16, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2)])
TUNE_KEY = ["Q_BUCKET", "K_BUCKET", "HEAD_DIM", "CAUSAL", "DROPOUT"]


ASSUMED_SMS = 132  # an H100's streaming multiprocessors: the split-KV rule's GPU when there is none (interpreter)
_sm_counts: dict = {}
_forced_splits: list = []  # tests: the split count to use instead of the rule's


def sm_count(device) -> int:
    """Streaming multiprocessors of ``device`` (cached), or ASSUMED_SMS off CUDA."""
    if device.type != "cuda":
        return ASSUMED_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


SPLIT_GRANULARITY = 128  # keys per split are a multiple of the largest key block any launch uses (CUDA or not)


def kv_splits(batch_heads: int, q_len: int, k_len: int, device) -> tuple[int, int]:
    """(splits, keys per split) of the forward: _grid.kv_splits's rule for ``device``'s SM count (or a forced
    count, see :func:`force_kv_splits`)."""
    if _forced_splits:
        return _grid.split_plan(k_len, _forced_splits[-1], SPLIT_GRANULARITY)
    return _grid.kv_splits(batch_heads, q_len, k_len, sm_count(device), SPLIT_GRANULARITY)


@contextlib.contextmanager
def force_kv_splits(splits: int):
    """Tests: inside this block the forward splits the keys in (at most) ``splits`` parts of a multiple of
    SPLIT_GRANULARITY keys whatever the rule says; 1 = never split."""
    _forced_splits.append(splits)
    try:
        yield
    finally:
        _forced_splits.pop()


def build(jit_fn, configs):
    """The kernel to launch: the plain jit function when interpreting, else an autotuner."""
    if interpreting():
        return jit_fn
    return triton.autotune(configs=configs, key=TUNE_KEY)(jit_fn)


def launch_kwargs(q_len: int, k_len: int) -> dict:
    """Extra launch arguments: tuning buckets, plus the current interpreter blocks when interpreting."""
    extra = {"Q_BUCKET": triton.next_power_of_2(q_len), "K_BUCKET": triton.next_power_of_2(k_len)}
    if interpreting():
        extra.update(_interpret_blocks)
    return extra
