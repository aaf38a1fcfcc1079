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
        16, 16, 32, 1024, 1024, 2048, 16384, 16384]
    assert [_tuning.bh_bucket(n) for n in (1, 2, 4, 5, 16, 17, 1000, 4096, 4097, 2048 * 32)] == [
        1, 4, 4, 16, 16, 64, 1024, 4096, 4096, 4096]
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
    assert set(first) == {"forward", "split", "dkdv", "dq"}
    assert first["dkdv"] is _tuning.DKDV_CONFIGS[0]
    pinned = _tuning.pinned_configs(" forward=128x64x8x3, dq=64x32x4x2")
    assert set(pinned) == {"forward", "dq"}
    config = pinned["dq"]
    assert (config.kwargs, config.num_warps, config.num_stages) == ({"BLOCK_M": 64, "BLOCK_N": 32}, 4, 2)
    assert _tuning.pinned_configs("") == {}
    for bad, message in (("fwd=128x64x8x3", r"KERNEL=BLOCK_MxBLOCK_NxWARPSxSTAGES .* got 'fwd=128x64x8x3'"),
                         ("forward=128x64x8", r"got 'forward=128x64x8'"),
                         ("dq=48x32x4x2", r"BLOCK_M of dq must be one of \(16, 32, 64, 128\), got 48")):
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
    assert tuned.configs == _tuning.DKDV_CONFIGS and tuned.keys == _tuning.TUNE_KEY and tuned.cache_results
    assert len(pinned.configs) == 1 and pinned.configs[0].kwargs == {"BLOCK_M": 64, "BLOCK_N": 32}
    monkeypatch.setenv(_tuning.CONFIGS_ENV, "first")
    assert _tuning.build(_forward._fwd_kernel, "split").configs == [_tuning.SPLIT_CONFIGS[0]]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _tuning.build(_forward._fwd_kernel, "forward") is _forward._fwd_kernel
