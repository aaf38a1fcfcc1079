"""The checks switch: contracts on or off, for the process and for one thread or asyncio task.

A process-wide default (:func:`set_checks`, the environment variable ``TYPED_TRANSFORMER_CHECKS=0`` read at import)
and a per-context override (``with checks(False):``, a ``contextvars.ContextVar``, so threads and asyncio tasks each
see their own), both held by ``CHECKS``, a :class:`~transformer.common.switches.ContextSetting`: off costs one C call
per checked call, and under torch.compile the setting is part of what a compiled graph is guarded on.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager

from ..common.switches import ContextSetting

_FALSE_WORDS = {"0", "false", "no", "off"}
#: whether contracts are checked: ``CHECKS.default`` for the process, ``with CHECKS.block(value)`` for a context
CHECKS: ContextSetting[bool] = ContextSetting(
    "typed_transformer_checks",
    os.environ.get("TYPED_TRANSFORMER_CHECKS", "1").strip().lower() not in _FALSE_WORDS,
)


def checks_enabled() -> bool:
    """Whether contracts are checked right now, in this thread or task (under torch.compile too)."""
    return CHECKS.get()


def set_checks(enabled: bool) -> None:
    """Turn every contract check of the package on or off: the process-wide default.

    A ``with checks(...)`` block in progress keeps its own setting; every other thread and task follows the default.
    """
    CHECKS.default = bool(enabled)


def checks(enabled: bool) -> AbstractContextManager[None]:
    """Context manager: ``with checks(False): model(...)`` runs unchecked, then restores.

    The setting belongs to the current thread or asyncio task (a ``contextvars.ContextVar``): other threads and tasks
    keep theirs, and a task started inside the block inherits it. A block inside a function being compiled governs
    the calls inside it, for that trace.
    """
    return CHECKS.block(bool(enabled))
