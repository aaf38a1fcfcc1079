"""The installed torch's version, parsed once: features are chosen by it (``TORCH_VERSION >= (2, 5)``)."""

from __future__ import annotations

import torch


def major_minor(version: str) -> tuple[int, int]:
    """``(2, 5)`` out of ``"2.5.1+cu121"``: the release's major and minor numbers (local and patch parts ignored)."""
    major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    return major, minor


#: (major, minor) of the installed torch
TORCH_VERSION: tuple[int, int] = major_minor(torch.__version__)
