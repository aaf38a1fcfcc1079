"""Turn the optional masks into kernel arguments (pointers and strides) without materializing anything."""

import torch


def mask_args(q: torch.Tensor, k: torch.Tensor, mask, key_mask, key_lengths) -> dict:
    """Kernel arguments for the three mask kinds; absent ones get a dummy pointer the kernel never reads.

    Every tensor goes with its strides (a sliced, transposed or expanded tensor is read where it lies, never
    copied)."""
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    args = {}
    if mask is not None:
        full = torch.broadcast_to(mask, (batch, heads, q_len, k_len))  # a view: broadcast dims get stride 0
        args.update(MASK=full.view(torch.uint8), s_mb=full.stride(0), s_mh=full.stride(1),
                    s_mm=full.stride(2), s_mn=full.stride(3), HAS_MASK=True)
    else:
        args.update(MASK=q, s_mb=0, s_mh=0, s_mm=0, s_mn=0, HAS_MASK=False)
    if key_mask is not None:
        args.update(KMASK=key_mask.view(torch.uint8), s_kmb=key_mask.stride(0), s_kmn=key_mask.stride(1),
                    HAS_KMASK=True)
    else:
        args.update(KMASK=q, s_kmb=0, s_kmn=0, HAS_KMASK=False)
    if key_lengths is not None:
        args.update(KLEN=key_lengths, s_klb=key_lengths.stride(0), HAS_KLEN=True)
    else:
        args.update(KLEN=q, s_klb=0, HAS_KLEN=False)
    return args


def strides(prefix: str, t: torch.Tensor, seq: str = "m") -> dict:
    """Kernel stride arguments of a (batch, heads, len, head_dim) tensor: s_{prefix}b, _h, _{seq}, _d."""
    return {f"s_{prefix}{axis}": t.stride(i) for i, axis in enumerate(("b", "h", seq, "d"))}


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs use full-precision dots (eager PyTorch does not use TF32 by default either)."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator and logsumexp dtype: float32, or float64 for float64 inputs (interpreter only)."""
    return torch.float64 if dtype == torch.float64 else torch.float32
