"""Launch configuration: autotuning on CUDA, one fixed configuration under TRITON_INTERPRET=1.

Autotuning with more than one config touches the driver, which does not exist without a GPU.
"""

import os

import triton

INTERPRET_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32}


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
TUNE_KEY = ["Q_BUCKET", "K_BUCKET", "HEAD_DIM", "CAUSAL", "DROPOUT"]


def build(jit_fn, configs):
    """The kernel to launch: the plain jit function when interpreting, else an autotuner."""
    if interpreting():
        return jit_fn
    return triton.autotune(configs=configs, key=TUNE_KEY)(jit_fn)


def launch_kwargs(q_len: int, k_len: int) -> dict:
    """Extra launch arguments: tuning buckets, plus the fixed blocks when interpreting."""
    extra = {"Q_BUCKET": triton.next_power_of_2(q_len), "K_BUCKET": triton.next_power_of_2(k_len)}
    if interpreting():
        extra.update(INTERPRET_BLOCKS)
    return extra
