"""Weights that are NaN or infinite: found in one read-back, named in one phrase (a diverged run's are never saved
or loaded silently)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["nonfinite_tensors", "describe_nonfinite"]


def nonfinite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[tuple[str, int, int]]:
    """``(name, non-finite values, size)`` of each floating tensor of ``named`` holding a NaN or an infinity.

    One read-back for all the tensors (on a GPU: one synchronisation). A sharded tensor (FSDP's DTensor) is
    checked on this rank's shard."""
    names, counts, sizes = [], [], []
    for name, tensor in named:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        names.append(name)
        counts.append((~torch.isfinite(local.detach())).sum())
        sizes.append(local.numel())
    if not names:
        return []
    totals = torch.stack([c.to("cpu") if c.device.type != "cpu" else c for c in counts]).tolist()
    return [(name, int(n), size) for name, n, size in zip(names, totals, sizes, strict=True) if n]


def describe_nonfinite(bad: list[tuple[str, int, int]], shown: int = 3) -> str:
    """``"2 tensors: a.weight (3 of 64 values), b.bias (all 8 values)"`` for ``nonfinite_tensors``' list."""
    parts = [f"{name} ({f'all {size}' if n == size else f'{n} of {size}'} values)" for name, n, size in bad[:shown]]
    more = f" and {len(bad) - shown} more" if len(bad) > shown else ""
    return f"{len(bad)} tensor{'s' if len(bad) != 1 else ''}: {', '.join(parts)}{more}"
