"""Errors raised from a compiled graph: an operator that raises when the graph runs, not while Dynamo traces.

Raising while torch.compile traces reaches a ``fullgraph=True`` caller as Dynamo's ``Unsupported`` ("Observed
exception"), not as the error the eager call raises. So code that finds, while tracing, that a call must fail puts
an operator made here into the graph instead: its fake version returns a placeholder tensor of the shape the call
promised (tracing goes on, in one graph), its real version raises the error when the compiled graph runs. It is
registered as an effect, so that no compiler removes it as dead code when nothing reads the placeholder.

An operator made with ``while_tracing=True`` raises already while Dynamo traces: its fake version raises the error
(a :class:`RaisedWhileTracing`), which Dynamo hands to the caller unchanged, so the code after the failing call is
never traced (no placeholder, and no later operation failing on it first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import Tensor

from .versions import TORCH_VERSION

#: an error from the operator's message and the sizes of the call being run (``message.format(*sizes)``, say)
ErrorMaker = Callable[[str, list], Exception]


class RaisedWhileTracing(IndexError):
    """The base of an error a fake implementation raises on purpose while Dynamo traces. Dynamo passes an
    ``IndexError`` from a fake implementation to the caller unchanged (``torch/_dynamo/utils.py``, ``run_node``: the
    dimension errors of ``maybe_wrap_dim``; torch 2.13), where any other exception becomes its
    ``TorchRuntimeError``, ``Unsupported`` or ``InternalTorchDynamoError``. Before torch 2.13 (from 2.9 on) only
    Dynamo's own ``Unsupported`` passes unchanged: see :func:`_handed_on`."""

    def __str__(self) -> str:
        text = self.__dict__.get("_text")  # the message as raised (see _handed_on), else as the arguments say
        return text if text is not None else super().__str__()


#: whether Dynamo hands an ``IndexError`` from a fake implementation on unchanged (torch 2.13 and later)
_INDEX_ERROR_PASSES = TORCH_VERSION >= (2, 13)


def _handed_on(error: RaisedWhileTracing) -> RaisedWhileTracing:
    """``error``, made so that Dynamo hands it to the caller unchanged. From torch 2.13 on it is as it is. Before,
    ``run_node`` and ``get_fake_value`` re-raise only Dynamo's ``Unsupported`` as it is, so the error's class gets
    ``Unsupported`` as one more base (once, the first time one is raised: Dynamo is imported by then, and the class
    stays the one the caller catches, ``type(error) is CompiledContractError``), the instance gets the attributes
    Dynamo reads from an ``Unsupported``, and its message is kept as raised: Dynamo appends its own trace ("from user
    code: ...") to the arguments of an ``Unsupported`` it passes on, which ``__str__`` does not show."""
    if _INDEX_ERROR_PASSES:
        return error
    from torch._dynamo.exc import Unsupported  # imported already: this runs while Dynamo traces

    cls = type(error)
    if not issubclass(cls, Unsupported):
        cls.__bases__ = (*cls.__bases__, Unsupported)
    text = str(error)
    Unsupported.__init__(error, text)
    error._text = text
    return error


class _QuietAboutOurs(logging.Filter):
    """FakeTensorMode logs every TypeError a fake implementation raises, with its traceback, before re-raising it:
    not for the errors raised here on purpose (the caller gets them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], RaisedWhileTracing))


def _size(size) -> int | str:
    """A size as the call being traced has it: a symbolic size's hint (what the traced call was given)."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return int(hint) if hint is not None else str(size)
    return size


def raising_operator(name: str, make_error: ErrorMaker, while_tracing: bool = False) -> torch._ops.OpOverload:
    """The operator ``typed_transformer::<name>(message, sizes, shape, dtype, device, after) -> Tensor``, defined once
    per process (a reload finds it defined and keeps it).

    Run, it raises ``make_error(message, sizes)``; traced, it returns ``torch.empty(shape, dtype, device)``. ``after``
    (a tensor or None) is a previous such operator's output, to keep several in the order they were traced.
    With ``while_tracing``, traced it raises too, with the sizes of the call being traced; ``make_error`` must then
    return a :class:`RaisedWhileTracing` for Dynamo to hand it on unchanged.
    """
    if not hasattr(torch.ops.typed_transformer, name):
        _define(name, make_error, while_tracing)
    return getattr(torch.ops.typed_transformer, name).default


#: the operators' schema, written out: torch before 2.7 cannot infer one from ``list[int]`` or ``Tensor | None``
_SCHEMA = "(str message, SymInt[] sizes, SymInt[] shape, ScalarType dtype, Device device, Tensor? after) -> Tensor"


def _define(name: str, make_error: ErrorMaker, while_tracing: bool) -> None:
    def raise_error(
        message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device, after: Tensor | None
    ) -> Tensor:
        raise make_error(message, sizes)

    def placeholder(
        message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device, after: Tensor | None
    ) -> Tensor:
        if while_tracing:
            raise _handed_on(make_error(message, [_size(size) for size in sizes]))
        return torch.empty(shape, dtype=dtype, device=device)  # what the failing call promised: tracing goes on

    if while_tracing:
        logging.getLogger("torch._subclasses.fake_tensor").addFilter(_QuietAboutOurs())
    operator = torch.library.custom_op(f"typed_transformer::{name}", raise_error, mutates_args=(), schema=_SCHEMA)
    operator.register_fake(placeholder)
    op = getattr(torch.ops.typed_transformer, name).default
    try:  # an effect: never removed as dead code, since the error is due even when nothing reads the placeholder
        torch.library._register_effectful_op(op, torch._library.effects.EffectType.ORDERED)
    except AttributeError:  # a torch without the effects registry: at least keep it out of dead-code elimination
        torch.fx.node.has_side_effect(op)
