"""Fused Triton attention kernels, shipped as ``transformer.kernels``. Imports torch and triton only."""
