"""Fused Triton attention kernels, shipped as ``transformer.kernels``. Imports torch and triton only.

Public API: :func:`flash_attention`, :func:`flash_attention_with_lse`, :func:`unsupported_reason`, :func:`tune`
(autotune ahead of CUDA graph capture), :func:`auto_reason` (why automatic backend selection should not pick the
kernel).
Importing this package never touches a GPU driver; the kernels themselves are decorated at their first
launch, so ``TRITON_INTERPRET=1`` may be set any time before then. See docs/kernels.md.
"""

# first: without Triton, or with a Triton older than the kernels support, fail here in one line, before any op is
# registered with torch.library
from ._triton_version import OLDEST_TRITON  # noqa: F401, I001  (the first import: see above)
from ._api import flash_attention, flash_attention_with_lse, tune
from ._validate import auto_reason, unsupported_reason

__all__ = ["auto_reason", "flash_attention", "flash_attention_with_lse", "tune", "unsupported_reason"]
