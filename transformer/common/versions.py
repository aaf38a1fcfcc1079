"""The installed torch's version, parsed once: features are chosen by it (``TORCH_VERSION >= (2, 5)``)."""

from __future__ import annotations

import warnings

import torch


def major_minor(version: str) -> tuple[int, int]:
    """``(2, 5)`` out of ``"2.5.1+cu121"``: the release's major and minor numbers (local and patch parts ignored)."""
    major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    return major, minor


#: (major, minor) of the installed torch
TORCH_VERSION: tuple[int, int] = major_minor(torch.__version__)

#: the oldest torch the package supports: the oldest tried whose Dynamo hands an error raised while it traces on to the
#: caller, which the compiled contracts need (docs/install.md, "Supported versions", says why and what was tested)
OLDEST_TORCH: tuple[int, int] = (2, 9)


def warn_if_unsupported(version: tuple[int, int] = TORCH_VERSION, installed: str = torch.__version__) -> None:
    """Warn once, in one line, when the installed torch is older than :data:`OLDEST_TORCH` (pip does not install the
    package beside one; a ``--no-deps`` install or a checkout on ``sys.path`` can)."""
    if version < OLDEST_TORCH:
        oldest = ".".join(map(str, OLDEST_TORCH))
        warnings.warn(
            f"typed-transformer supports torch >= {oldest} and torch {installed} is installed: compiled contracts and "
            f'other features may fail; install a supported one with: pip install "torch>={oldest}"',
            stacklevel=3,
        )
