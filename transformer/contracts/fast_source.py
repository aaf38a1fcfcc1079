"""The source of one generated eager checker as ``transformer.contracts.fast`` writes it.

A :class:`CheckerSource` holds the lines written so far (with their indentation), the constants they refer to, and
what the code written so far has bound: for each dimension name whether it is bound on every path, on none, or on
some (``maybe``: the generated code tests it at run time). Generated code raises :class:`Miss` to hand the call to
jaxtyping.
"""

from __future__ import annotations

import collections.abc
import contextlib
from collections.abc import Iterator

from .grammar import join_variadic


class Miss(Exception):
    """Raised inside a generated checker: hand the call to jaxtyping."""


MISSING = object()  # a dimension name not bound yet (``_M`` in the generated code)
BOUND, UNBOUND, MAYBE = "bound", "unbound", "maybe"


class CheckerSource:
    """The source of one checker, and the constants it refers to."""

    def __init__(self, params: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.namespace: dict[str, object] = {
            "_Miss": Miss,
            "_M": MISSING,
            "_join": join_variadic,
            "_INF": float("inf"),
            "_Callable": collections.abc.Callable,
        }
        self.count = 0
        self.params = params  # parameter name -> its local variable
        self.single: dict[str, str] = {}  # dimension name -> BOUND / UNBOUND / MAYBE
        self.variadic: dict[str, object] = {}  # *name -> UNBOUND / MAYBE / (BOUND, broadcastable or None)
        self.restore: list[list[str]] = []  # inside union alternatives: what a failed array check must undo
        self.level = 0  # > 0 inside code that may not run (an optional argument, a union alternative)
        self.fields_read: dict[tuple, str] | None = None  # the fields the array check being written reads
        #: arrays checked on every valid call: dims -> (the local holding their shape, {field: local holding it})
        self.shapes: dict[tuple, tuple[str, dict[tuple, str]]] = {}
        self.returning = False

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.emit(header)
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: object, prefix: str = "_c") -> str:
        for key, known in self.namespace.items():
            if known is value and key.startswith(prefix):
                return key
        key = self.name(prefix)
        self.namespace[key] = value
        return key

    def dim(self, name: str) -> str:
        self.single.setdefault(name, UNBOUND)
        return "d_" + name

    def var(self, name: str) -> str:
        self.variadic.setdefault(name, UNBOUND)
        return "v_" + name

    @contextlib.contextmanager
    def conditional(self) -> Iterator[None]:
        """Code that may not run (an optional argument, a union alternative): names it binds are 'maybe' after it."""
        single, variadic = dict(self.single), dict(self.variadic)
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1
        for name, state in self.single.items():
            if single.get(name, UNBOUND) != state:
                self.single[name] = MAYBE
        for name, state in self.variadic.items():
            if variadic.get(name, UNBOUND) != state:
                self.variadic[name] = MAYBE
