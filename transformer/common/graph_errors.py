"""Errors raised from a compiled graph: an operator that raises when the graph runs, not while Dynamo traces.

Raising while torch.compile traces reaches a ``fullgraph=True`` caller as Dynamo's ``Unsupported`` ("Observed
exception"), not as the error the eager call raises. So code that finds, while tracing, that a call must fail puts
an operator made here into the graph instead: its fake version returns a placeholder tensor of the shape the call
promised (tracing goes on, in one graph), its real version raises the error when the compiled graph runs. It is
registered as an effect, so that no compiler removes it as dead code when nothing reads the placeholder.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

#: an error from the operator's message and the sizes of the call being run (``message.format(*sizes)``, say)
ErrorMaker = Callable[[str, list], Exception]


def raising_operator(name: str, make_error: ErrorMaker) -> torch._ops.OpOverload:
    """The operator ``typed_transformer::<name>(message, sizes, shape, dtype, device, after) -> Tensor``, defined once
    per process (a reload finds it defined and keeps it).

    Run, it raises ``make_error(message, sizes)``; traced, it returns ``torch.empty(shape, dtype, device)``. ``after``
    (a tensor or None) is a previous such operator's output, to keep several in the order they were traced.
    """
    if not hasattr(torch.ops.typed_transformer, name):
        _define(name, make_error)
    return getattr(torch.ops.typed_transformer, name).default


def _define(name: str, make_error: ErrorMaker) -> None:
    def raise_error(
        message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device, after: Tensor | None
    ) -> Tensor:
        raise make_error(message, sizes)

    def placeholder(
        message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device, after: Tensor | None
    ) -> Tensor:
        return torch.empty(shape, dtype=dtype, device=device)  # what the failing call promised: tracing goes on

    operator = torch.library.custom_op(f"typed_transformer::{name}", raise_error, mutates_args=())
    operator.register_fake(placeholder)
    op = getattr(torch.ops.typed_transformer, name).default
    try:  # an effect: never removed as dead code, since the error is due even when nothing reads the placeholder
        torch.library._register_effectful_op(op, torch._library.effects.EffectType.ORDERED)
    except AttributeError:  # a torch without the effects registry: at least keep it out of dead-code elimination
        torch.fx.node.has_side_effect(op)
