"""What an argument is, checked the same way everywhere: an integer that is not a bool, a real number.

``True`` is an ``int`` to Python (``isinstance(True, int)``), so ``n_layers=True`` would pass a bare ``isinstance``
check and build one layer. Every validator of the package asks these predicates instead, and writes its own message
(naming its argument, the expected and the actual value) beside them.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["is_int", "is_integral", "is_number", "is_real"]


def is_int(value: object, at_least: int | None = None, below: int | None = None) -> bool:
    """Whether ``value`` is a Python ``int`` (not a bool) with ``at_least <= value < below`` (each bound optional).
    A symbolic size (``torch.SymInt``, which torch.export traces a size as) counts as the int it stands for."""
    if isinstance(value, bool) or not (isinstance(value, int) or type(value).__name__ == "SymInt"):
        return False
    return (at_least is None or value >= at_least) and (below is None or value < below)


def is_integral(value: object, at_least: int | None = None) -> bool:
    """Whether ``value`` is an integer of any kind (``numbers.Integral``: a numpy or Python int, not a bool) with
    ``value >= at_least`` (optional)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    return at_least is None or value >= at_least


def is_real(value: object) -> bool:
    """Whether ``value`` is a real number (int, float, numpy scalar), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_number(value: object, finite: bool = False) -> bool:
    """Whether ``value`` is a Python ``int`` or ``float`` (not a bool; numpy scalars are not: a config holds what JSON
    can write), and finite if ``finite``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not finite or math.isfinite(value)
