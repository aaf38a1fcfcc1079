"""Autotuning on CUDA (kernels/_tuning.py), tested without a GPU: the tuning key and its buckets, configs pinned by
TYPED_TRANSFORMER_KERNEL_CONFIGS, tuned choices persisted, and what every launch is given."""

import pytest
import torch
import triton
from launch_capture import launches

from transformer.kernels import _backward, _forward, _tuning, flash_attention


def test_length_and_batch_heads_buckets():
    """Lengths tune in powers of two from 16 to 16384 (longer ones share a config); batch x heads in powers of 4
    up to 4096, so a config tuned on 8 (batch, head) pairs is not reused on 8000."""
    assert [_tuning.length_bucket(n) for n in (1, 16, 17, 1000, 1024, 1025, 16384, 10**6)] == [
        16,
        16,
        32,
        1024,
        1024,
        2048,
        16384,
        16384,
    ]
    assert [_tuning.bh_bucket(n) for n in (1, 2, 4, 5, 16, 17, 1000, 4096, 4097, 2048 * 32)] == [
        1,
        4,
        4,
        16,
        16,
        64,
        1024,
        4096,
        4096,
        4096,
    ]
    assert "BH_BUCKET" in _tuning.TUNE_KEY and {"Q_BUCKET", "K_BUCKET", "HEAD_DIM"} <= set(_tuning.TUNE_KEY)


def test_every_tuned_launch_gets_the_buckets():
    """The forward, dK/dV and dQ launches (recorded, not run) carry the buckets the tuning key reads."""
    q, k, v = (torch.randn(3, 5, n, 16, requires_grad=True) for n in (100, 20, 20))
    with launches(run=False) as seen:
        flash_attention(q, k, v).backward(torch.ones(3, 5, 100, 16))
    for name in ("_fwd_kernel", "_dkdv_kernel", "_dq_kernel"):
        args = next(a for n, a in seen if n == name)
        assert (args["Q_BUCKET"], args["K_BUCKET"], args["BH_BUCKET"]) == (128, 32, 16), name


def test_pinned_configs_from_the_environment_variable():
    first = _tuning.pinned_configs("first")
    assert first == dict.fromkeys(("forward", "split", "dkdv", "dq"), _tuning.FIRST)
    pinned = _tuning.pinned_configs(" forward=128x64x8x3, dq=64x32x4x2")
    assert set(pinned) == {"forward", "dq"}
    config = pinned["dq"]
    assert (config.kwargs, config.num_warps, config.num_stages) == ({"BLOCK_M": 64, "BLOCK_N": 32}, 4, 2)
    assert _tuning.pinned_configs("") == {}
    for bad, message in (
        ("fwd=128x64x8x3", r"KERNEL=BLOCK_MxBLOCK_NxWARPSxSTAGES .* got 'fwd=128x64x8x3'"),
        ("forward=128x64x8", r"got 'forward=128x64x8'"),
        ("dq=48x32x4x2", r"BLOCK_M of dq must be one of \(16, 32, 64, 128\), got 48"),
    ):
        with pytest.raises(ValueError, match="TYPED_TRANSFORMER_KERNEL_CONFIGS" + ".*" + message):
            _tuning.pinned_configs(bad)


def test_build_pins_and_persists_on_cuda(monkeypatch):
    """Off the interpreter (as on a GPU) each kernel is an autotuner keyed by TUNE_KEY over its configs, whose
    timings persist in Triton's cache; a pinned kernel has only its one config (nothing to time)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv(_tuning.CONFIGS_ENV, "dq=64x32x4x2")
    tuned = _tuning.build(_backward._dkdv_kernel, "dkdv")
    pinned = _tuning.build(_backward._dq_kernel, "dq")
    assert isinstance(tuned, triton.runtime.autotuner.Autotuner)
    assert tuned.configs == _tuning.DKDV_CONFIGS and tuned.cache_results
    assert tuned.keys == [*_tuning.TUNE_KEY, "BLOCK_D2"]  # the head-dim tile: padded or in pieces
    assert len(pinned.configs) == 1 and pinned.configs[0].kwargs == {"BLOCK_M": 64, "BLOCK_N": 32}
    assert "dkdv" in _tuning._tuned and "dq" not in _tuning._tuned  # only a tuned kernel can time at capture
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _tuning.build(_forward._fwd_kernel, "forward") is _forward._fwd_kernel


def _pruned(kernel, head_dim, dtype=torch.bfloat16):
    block_d = max(16, triton.next_power_of_2(head_dim))
    return kernel.early_config_prune(kernel.configs, {"Q": torch.empty(1, dtype=dtype)}, BLOCK_D=block_d)


def test_configs_that_do_not_fit_shared_memory_are_pruned_and_first_pins_one_that_fits(monkeypatch):
    """Issue 27: at head_dim 256 the forward's first config (128x64, 3 stages) needs 256 KiB of shared memory and
    128x128 x 2 stages 320 KiB (the limit is 227 KiB): a launch never tries them, and ``first`` pins the first
    config that fits the launch's head_dim and dtype, not one that cannot launch."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv(_tuning.CONFIGS_ENV, raising=False)
    forward = _tuning.build(_forward._fwd_kernel, "forward")
    assert _tuning.shared_bytes("forward", _tuning.FWD_CONFIGS[0], 256, 2) >= 256 * 1024
    assert _tuning.shared_bytes("forward", _tuning.FWD_CONFIGS[2], 256, 2) >= 320 * 1024
    at_256 = _pruned(forward, 256)
    assert _tuning.FWD_CONFIGS[0] not in at_256 and _tuning.FWD_CONFIGS[2] not in at_256 and at_256
    assert _pruned(forward, 64) == _tuning.FWD_CONFIGS  # everything fits at head_dim 64 in bf16
    assert len(_pruned(forward, 256, torch.float32)) < len(at_256)  # float32 tiles are twice as large
    monkeypatch.setenv(_tuning.CONFIGS_ENV, "first")
    for name, fn in (
        ("forward", _forward._fwd_kernel),
        ("split", _forward._fwd_kernel),
        ("dkdv", _backward._dkdv_kernel),
        ("dq", _backward._dq_kernel),
    ):
        kernel = _tuning.build(fn, name)
        assert name not in _tuning._tuned
        for head_dim in (16, 64, 128, 256):
            for dtype in (torch.bfloat16, torch.float32):
                (config,) = _pruned(kernel, head_dim, dtype)
                block_d = max(16, triton.next_power_of_2(head_dim))
                assert _tuning.fits(name, config, block_d, dtype.itemsize), (name, head_dim, dtype, config)
        assert _pruned(kernel, 64) == [_tuning.KERNEL_CONFIGS[name][0]]


def test_every_kernel_has_a_config_that_fits_at_every_head_dim():
    for name, configs in _tuning.KERNEL_CONFIGS.items():
        smallest = configs[-1]
        assert _tuning.fits(name, smallest, 256, 4), name
        assert len({(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) for c in configs}) == len(
            configs
        ), name


def test_decoding_keys_tune_in_powers_of_four():
    """A decoding loop (one query, k_len growing one by one up to 16k) meets 4 key buckets, not 11; longer queries
    keep powers of two."""
    assert sorted({_tuning.buckets(1, k, 8)[1] for k in range(1, 20000, 7)}) == [256, 1024, 4096, 16384]
    assert _tuning.buckets(64, 300, 8)[1] == 1024 and _tuning.buckets(65, 300, 8)[1] == 512
    assert {"HAS_MASK", "HAS_KMASK", "HAS_KLEN", "group", "CAUSAL", "DROPOUT"} <= set(_tuning.TUNE_KEY)
