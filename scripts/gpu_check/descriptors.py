"""gpu_check: the forward through tensor descriptors (TMA) against the pointer path (issue 27), on the same pinned
config: the same inputs must give the same output (bitwise where the two paths load the same values into the same
dots). Called by checks.correctness; separate to keep checks.py short."""

import torch


def check_descriptors(checks, dtype):
    """Causal attention with key lengths over contiguous inputs (descriptors where the device has TMA) and over the
    pointer path; records which path ran and the largest difference."""
    _tuning, kernels = checks._tuning, checks.kernels  # ``checks``: the running checks.py module (__main__)
    device = checks.DEVICE
    length = 40 if checks.DRY else 1000
    gen = torch.Generator(device=device).manual_seed(5)
    q, k, v = (torch.randn(2, 4, length, 64, device=device, generator=gen, dtype=dtype) for _ in "qkv")
    lengths = torch.tensor([q.shape[2], q.shape[2] // 2 + 3], device=device)
    outs = []
    for enabled in (True, False):
        with _tuning.tensor_descriptors(enabled):
            outs.append(kernels.flash_attention(q, k, v, causal=True, key_lengths=lengths))
    with _tuning.tensor_descriptors(True):
        tma = _tuning.tma_enabled(q.device)
    diff = (outs[0].float() - outs[1].float()).abs().max().item()
    checks.record(
        "descriptors_vs_pointers", dtype=str(dtype), tma_available=tma, bitwise=torch.equal(*outs), max_diff=diff,
        ok=diff <= 1e-2 and not outs[0].isnan().any().item(),
    )  # fmt: skip
