"""A run-time setting per thread and asyncio task that torch.compile guards on: the checks switch and the backend
choice are each one :class:`ContextSetting`.

A ``with`` block sets the value in a ``contextvars.ContextVar`` (so threads and asyncio tasks each see their own).
Reading it must be cheap (once per checked call) and visible to torch.compile: Dynamo cannot trace
``ContextVar.get``, and a graph must only be reused under the value it was traced with. So the value is read through
``setting.reader.value``, a property whose getter is the ContextVar's own C ``get`` called with the reader as its
default: one C call in eager mode, and, under torch.compile, something Dynamo evaluates for real and guards on. A
block written inside a function being compiled cannot set the ContextVar (Dynamo cannot trace ``ContextVar.set``):
there it pushes its value on ``setting.trace_stack``, in traced code (empty whenever no trace is under way).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Generic, TypeVar

import torch

V = TypeVar("V")


class ContextSetting(Generic[V]):
    """A value set by ``with setting.block(value):``, per thread and asyncio task, over a process-wide ``default``.

    ``reader.value`` is the innermost block's value, or ``reader`` itself outside every block; ``trace_stack`` holds
    the values of blocks inside a function being traced, innermost last (see the module docstring). :meth:`get`
    reads the three; the checked-call wrapper reads them inline, the cheapest way.
    """

    __slots__ = ("default", "reader", "trace_stack", "variable")

    def __init__(self, name: str, default: V) -> None:
        self.default = default
        self.variable: contextvars.ContextVar[V] = contextvars.ContextVar(name)
        reader_class = type(f"{name}_reader", (), {"__slots__": (), "value": property(self.variable.get)})
        self.reader = reader_class()
        self.trace_stack: list[V] = []

    def get(self) -> V:
        """The innermost block's value in this thread or task (under torch.compile too), else the default."""
        if self.trace_stack:
            return self.trace_stack[-1]
        value = self.reader.value
        return self.default if value is self.reader else value

    @contextlib.contextmanager
    def block(self, value: V) -> Iterator[None]:
        """``with setting.block(value):`` the setting is ``value`` in this thread or task (a task started inside
        inherits it), then what it was; inside a function being compiled, for that trace."""
        if torch.compiler.is_compiling():  # a block inside the compiled function: this trace only
            self.trace_stack.append(value)
            try:
                yield
            finally:
                self.trace_stack.pop()
            return
        token = self.variable.set(value)
        try:
            yield
        finally:
            self.variable.reset(token)
