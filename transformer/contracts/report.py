"""What a violated contract says: one summary line, then jaxtyping's and beartype's own report.

The summary line names the failing call (and its callers: ``Outer.forward > Inner.forward:``), the argument, what it
is and what was expected, the values of the ``{self.x}`` fields the annotation reads and the sizes bound so far. In
eager mode it is read out of jaxtyping's report (:func:`located`), which :class:`Reporter` writes by checking the call
with jaxtyping + beartype; under torch.compile the traced checker writes the same line itself, with the same helpers.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import threading
from collections.abc import Callable, Sequence

import torch
from jaxtyping import TypeCheckError

from ..common.dtypes import DTYPE_SHORT_NAMES

_MISSING = object()


def clean_expected(text: str) -> str:
    """``Float[Tensor, 'batch d_model']`` rather than ``<class 'jaxtyping.Float[Tensor, 'batch d_model']'>``."""
    text = text.replace("jaxtyping.", "")
    if text.startswith("<class '") and text.endswith("'>"):
        text = text[8:-2]
    return text


def escape_braces(text: str) -> str:
    """``text`` as a literal part of a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def annotation_text(x: object) -> str:
    """An annotation as jaxtyping writes it in its messages."""
    x = str(x)
    for prefix in ("jaxtyping.", "typing."):
        for before in (" ", "[", "'"):
            x = x.replace(before + prefix, before)
    return x


def expected_text(annotation_text: str) -> str:
    """The 'expected' part of the summary line, exactly as :func:`summary` reads it from jaxtyping's message."""
    found = re.search(r"Expected type: (.*?)\.?$", f"Expected type: {annotation_text}.", re.MULTILINE)
    return clean_expected(found.group(1)) if found else "?"


def field_text(fields: tuple, bound: dict, sizes: list | None = None) -> str:
    """`` (self.d_model=512)``: the values of an annotation's fields in this call, for the message's first line
    (``sizes``: traced, each int becomes ``{}`` and goes into ``sizes``). Empty when the annotation reads none."""
    parts = []
    for name, attributes in fields:
        if name not in bound:
            continue
        value, found = bound[name], True
        for attribute in attributes:
            if not hasattr(value, attribute):
                found = False
                break
            value = getattr(value, attribute)
        if not found:
            continue
        path = name + "".join("." + a for a in attributes)
        if sizes is not None and isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
            sizes.append(value)
            parts.append(path + "={}")
        elif sizes is not None:
            parts.append(path + "=" + escape_braces(repr(value)))
        else:
            parts.append(path + "=" + repr(value))
    return " (" + ", ".join(parts) + ")" if parts else ""


class CheckFailure(TypeCheckError):
    """A ``check(...)`` that failed inside the function of a checked call, whose wrapper adds the call's name."""


#: in a message template, where the name of the tensor a ``check(...)`` was given goes, read from its call site
TENSOR_NAME = "\x00"
_HERE = os.path.dirname(os.path.abspath(__file__))


def call_site_name(stack: Sequence) -> str:
    """``q`` for the call ``check(q, ...)``: the source of the first argument of the ``check`` call in the innermost
    frame of ``stack`` (``traceback.FrameSummary`` items, outermost first) outside this package's contracts."""
    for frame in reversed(stack):
        if os.path.dirname(os.path.abspath(frame.filename)) == _HERE:
            continue
        where = f"the tensor checked at {os.path.basename(frame.filename)}:{frame.lineno}"
        try:
            tree = ast.parse((frame.line or "").strip())
        except SyntaxError:  # a call spread over several lines
            return where
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            named = getattr(func, "id", None) or getattr(func, "attr", None)
            if named == "check" and node.args:
                return ast.unparse(node.args[0])
        return where
    return "the tensor"


def value_text(value, sizes: list, top: bool = True) -> str:
    """jaxtyping's short form of a value (``bool[3,5,5]``), with ``{}`` for each size, which goes into ``sizes``."""
    if isinstance(value, torch.Tensor):
        sizes.extend(value.shape)
        text = DTYPE_SHORT_NAMES[value.dtype] + "[" + ",".join(["{}"] * value.dim()) + "]"
        return text if top else text + "(torch)"
    if value is None or isinstance(value, (bool, float, str)):
        return escape_braces(repr(value))
    if isinstance(value, (int, torch.SymInt)):
        sizes.append(value)
        return "{}"
    if isinstance(value, (tuple, list)):
        items = [value_text(item, sizes, top=False) for item in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, (set, frozenset)):  # as repr writes them: {1, 2}, set(), frozenset({1})
        items = [value_text(item, sizes, top=False) for item in value]
        text = "{{" + ", ".join(items) + "}}" if items else ""
        return text if type(value) is set and items else type(value).__name__ + "(" + text + ")"
    if isinstance(value, dict):
        pairs = [value_text(k, sizes, top=False) + ": " + value_text(v, sizes, top=False) for k, v in value.items()]
        return "{{" + ", ".join(pairs) + "}}"
    return escape_braces(type(value).__name__) + "(...)"


def describe(
    subject: str, value, expected: str, single: dict, variadic: dict, fields: tuple, bound: dict
) -> tuple[str, list]:
    """The summary line of a violation as a format string with ``{}`` for every size, and the sizes: what
    :func:`summary` reads out of jaxtyping's report, written from the traced checker's memo."""
    sizes: list = []
    actual = value_text(value, sizes)
    expected = expected + field_text(fields, bound, sizes)
    names = []
    for name, size in single.items():
        names.append(name + "={}")
        sizes.append(size)
    for name, (_, shape, is_size) in variadic.items():
        sizes.extend(shape)
        inner = ", ".join(["{}"] * len(shape))
        if is_size:
            names.append(name + "=torch.Size([" + inner + "])")
        else:
            names.append(name + "=(" + inner + ("," if len(shape) == 1 else "") + ")")
    with_sizes = " with " + ", ".join(names) if names else ""
    return subject + " is " + actual + ", expected " + expected + with_sizes, sizes


def located(qualname: str, message: str, fields: Callable[[str], str] = lambda subject: "") -> str:
    """Prefix the failing call; a violation in a nested call keeps its summary and gains the caller's name.
    ``fields(name)`` gives the values of the ``{self.x}`` fields that argument's (or "return") annotation reads."""
    if message.startswith("Type-check error"):
        return f"{qualname}: {summary(message, fields)}\n{message}"
    return f"{qualname} > {message}"


def summary(message: str, fields: Callable[[str], str] = lambda subject: "") -> str:
    """One line out of jaxtyping's report: which argument, the actual and expected types, the bound sizes."""
    where = re.search(r"typechecking parameter '([^']+)'", message)
    subject = f"argument '{where.group(1)}'" if where else "the return value"
    values = fields(where.group(1) if where else "return")
    actual = re.search(r"Actual value: (.*)", message)
    expected = re.search(r"Expected type: (.*?)\.?$", message, re.MULTILINE)
    bound = message.split("axis annotation are as follows.\n")[-1].splitlines() if "as follows." in message else []
    sizes = f" with {', '.join(bound)}" if bound else ""
    actual_text = re.sub(r"\(torch\)$", "", actual.group(1)) if actual else "?"
    expected_part = clean_expected(expected.group(1)) if expected else "?"
    return f"{subject} is {actual_text}, expected {expected_part}{values}{sizes}"


class Reporter:
    """jaxtyping + beartype over ``fn``'s resolved signature, built at the first call that needs it (so that neither
    beartype nor jaxtyping's decoration cost anything at import). ``run(args, kwargs)`` is the full check of a call;
    ``run(args, kwargs, out)`` checks a call whose function has already returned ``out``, without calling it again."""

    def __init__(self, fn: Callable, signature: inspect.Signature) -> None:
        self.fn, self.signature = fn, signature
        self._typed: Callable | None = None
        self._local = threading.local()

    def _build(self) -> Callable:
        from beartype import beartype
        from jaxtyping import jaxtyped

        fn, local = self.fn, self._local

        def proxy(*args, **kwargs):
            out = getattr(local, "out", _MISSING)
            if out is _MISSING:
                return fn(*args, **kwargs)
            local.out = _MISSING
            return out

        proxy.__signature__ = self.signature
        for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
            setattr(proxy, attribute, getattr(fn, attribute, None))
        if getattr(fn, "__no_type_check__", False):
            proxy.__no_type_check__ = True
        self._typed = jaxtyped(proxy, typechecker=beartype)
        return self._typed

    def run(self, args: tuple, kwargs: dict, out: object = _MISSING):
        typed = self._typed or self._build()
        if out is _MISSING:
            return typed(*args, **kwargs)
        self._local.out = out
        try:
            return typed(*args, **kwargs)
        finally:
            self._local.out = _MISSING
