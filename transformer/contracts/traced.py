"""The contract checker that runs while torch.compile traces (see "torch.compile" in docs/contracts.md).

jaxtyping cannot check while Dynamo traces: its checks misfire on the fake tensors Dynamo traces with
(pytorch#122093, jaxtyping#196). ``transformer.contracts.checked`` hands such calls to :func:`call_traced`, which
checks the same annotations (read once, by :class:`Contract`) in plain Python that Dynamo traces into the graph's
guards, and turns a violation into an operator that raises the eager ``TypeCheckError`` (same first line) when the
compiled graph runs. No graph break, and no check left in a valid graph.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from jaxtyping import TypeCheckError
from torch import Tensor

from ..common.dtypes import DTYPE_SHORT_NAMES
from ..common.graph_errors import raising_operator
from .grammar import UnsupportedAnnotation, destring, hint_fields, parse_hint
from .report import annotation_text, escape_braces, expected_text, field_text
from .traced_rules import bind_arguments, evaluate, fits, note_sizes

# jaxtyping cannot run while Dynamo traces (its checks misfire on fake tensors, pytorch#122093), and a Python
# exception raised while tracing reaches the user as torch._dynamo.exc.Unsupported ("Observed exception") under
# fullgraph=True. So while compiling, `checked` runs `call_traced`: plain Python over the annotations parsed once by
# `Contract`, which Dynamo traces like the model's own code. With static shapes every comparison is a constant; with
# dynamic shapes each one becomes a guard on the symbolic sizes (or is already decided by them), so a valid graph
# holds no check at all. A violation is not raised while tracing: the call is replaced by `contract_violation`, an
# operator whose fake version returns a placeholder of the promised shape (so tracing goes on, in one graph) and
# whose real version raises the TypeCheckError, formatted with the sizes of the actual call.

_EMPTY = inspect.Parameter.empty
_TRACE_CALLS: list[str] = []  # the checked calls being traced, outermost first: "Outer > Inner: ..." as in eager
# The violations traced so far in this graph: the next one takes the last one's placeholder as input, so that no
# compiler can run it first (eager raises the first violation). Appended only while tracing, where Dynamo replays
# list mutations after the graph has run, i.e. never: a graph holding a violation raises before.
_TRACE_VIOLATIONS: list[Tensor] = []

_COMPILED_NOTE = (
    "\n(raised by a graph compiled with torch.compile: typed-transformer checked this call's contract when "
    "the graph was traced; run it eagerly for jaxtyping's full report)"
)


def _violation_error(message: str, sizes: list) -> TypeCheckError:
    """The contract error (``message`` with ``{}`` for each size), raised when a compiled graph runs."""
    return TypeCheckError(message.format(*sizes) + _COMPILED_NOTE)


_contract_violation = raising_operator("contract_violation", _violation_error)
_PREFERRED_DTYPES = (torch.float32, torch.int64, torch.bool)


def _violation(message: str, sizes: list, shape: list, dtype: torch.dtype, device: torch.device) -> Tensor:
    after = _TRACE_VIOLATIONS[-1] if _TRACE_VIOLATIONS else None
    out = _contract_violation(message, sizes, shape, dtype, device, after)
    _TRACE_VIOLATIONS.append(out)
    return out


class Contract:
    """``fn``'s signature and annotations, read once, as the traced checker needs them."""

    __slots__ = (
        "_classes",
        "checks",
        "classes",
        "defaults",
        "fields",
        "params",
        "qualname",
        "result",
        "spec",
        "unsupported",
    )

    def __init__(self, fn: Callable, signature: inspect.Signature | None = None) -> None:
        """``signature``: ``fn``'s, with its annotations already resolved (by ``grammar.resolved_signature``,
        as jaxtyping resolves them); read from ``fn`` when not given."""
        self.qualname = escape_braces(fn.__qualname__)
        self.unsupported: list[str] = []
        self._classes: list[type] = []
        resolved = signature is not None
        signature = signature if resolved else inspect.signature(fn)
        params, checks = [], []
        for position, p in enumerate(signature.parameters.values()):
            positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            params.append(
                (
                    p.name,
                    position if positional else -1,
                    p.kind == p.VAR_POSITIONAL,
                    p.kind == p.VAR_KEYWORD,
                    p.default is not _EMPTY,
                )
            )
            annotation = p.annotation
            if annotation is not _EMPTY and not resolved:
                annotation = destring(annotation, fn.__globals__)
            hint = self._hint(annotation, p.name)
            if hint is not None:
                checks.append(
                    (p.name, hint, escape_braces(expected_text(annotation_text(annotation))), hint_fields(hint))
                )
        self.params, self.checks = tuple(params), tuple(checks)
        #: per checked argument (and "return"): the ``{name.attr}`` fields its annotation reads, for the messages
        self.fields = {check[0]: check[3] for check in checks}
        self.result = None
        if signature.return_annotation is not _EMPTY:
            annotation = signature.return_annotation
            if not resolved:
                annotation = destring(annotation, fn.__globals__)
            hint = self._hint(annotation, "return")
            if hint is not None:
                text = annotation_text(annotation)
                if text.startswith("<class '") and text.endswith("'>"):
                    text = text[8:-2]
                self.result = (hint, escape_braces(expected_text(text)), hint_fields(hint))
                self.fields["return"] = self.result[2]
        self.spec = (self.qualname, self.params, self.checks, self.result)
        self.classes = tuple(self._classes)
        self.defaults = tuple(p.default for p in signature.parameters.values())

    def _hint(self, annotation: object, name: str) -> tuple | None:
        try:
            return parse_hint(annotation, self._classes)
        except UnsupportedAnnotation as error:
            self.unsupported.append(f"{name}: {error}")
            return None


def _value_text(value, sizes: list, top: bool = True) -> str:
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
        items = [_value_text(item, sizes, top=False) for item in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    return escape_braces(type(value).__name__) + "(...)"


def _describe(
    subject: str, value, expected: str, single: dict, variadic: dict, fields: tuple, bound: dict
) -> tuple[str, list]:
    """``_summary``'s line for a violation: a format string with ``{}`` for every size, and the sizes."""
    sizes: list = []
    actual = _value_text(value, sizes)
    expected = expected + field_text(fields, bound, sizes)
    bound = []
    for name, size in single.items():
        bound.append(name + "={}")
        sizes.append(size)
    for name, (_, shape, is_size) in variadic.items():
        sizes.extend(shape)
        inner = ", ".join(["{}"] * len(shape))
        if is_size:
            bound.append(name + "=torch.Size([" + inner + "])")
        else:
            bound.append(name + "=(" + inner + ("," if len(shape) == 1 else "") + ")")
    with_sizes = " with " + ", ".join(bound) if bound else ""
    return subject + " is " + actual + ", expected " + expected + with_sizes, sizes


def _placeholder_shape(hint: tuple, single: dict, variadic: dict, bound: dict) -> list:
    """The shape a tensor annotation promises, from the sizes bound so far (1 for what is not bound)."""
    shape: list = []
    for dim in hint[2]:
        kind = dim[0]
        if kind in ("named",) and dim[1] in single:
            shape.append(single[dim[1]])
        elif kind == "fixed":
            shape.append(dim[1])
        elif kind == "symbolic":
            value = evaluate(dim[1], single, bound)
            shape.append(1 if value is None else value)
        elif kind == "var":
            if dim[1] in variadic:
                shape.extend(variadic[dim[1]][1])
        elif kind != "var_anon":
            shape.append(1)
    return shape


def _placeholder(hint: tuple, message: str, sizes: list, memo: list, bound: dict):
    """What the violated call returns while tracing: the violation operator's output, shaped as promised."""
    kind = hint[0]
    if kind == "union":
        for alternative in hint[1]:
            if alternative[0] in ("array", "tuple", "none"):
                return _placeholder(alternative, message, sizes, memo, bound)
    if kind == "tuple" and all(item[0] == "array" for item in hint[1]):
        return tuple(_placeholder(item, message, sizes, memo, bound) for item in hint[1])
    if kind == "none":
        _violation(message, sizes, [0], torch.float32, torch.device("cpu"))
        return None
    if kind != "array":
        raise TypeCheckError(_unformatted(message))
    tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
    dtype = None
    allowed = hint[1]
    for t in tensors:
        if allowed is None or t.dtype in allowed:
            dtype = t.dtype
            break
    if dtype is None and allowed is None:
        dtype = torch.float32
    if dtype is None:
        for candidate in _PREFERRED_DTYPES:
            if candidate in allowed:
                dtype = candidate
                break
    if dtype is None:
        dtype = allowed[0]
    device = tensors[0].device if tensors else torch.device("cpu")
    return _violation(message, sizes, _placeholder_shape(hint, memo[0], memo[1], bound), dtype, device)


def _unformatted(message: str) -> str:
    """A violation that cannot stay in the graph (the function promises no tensor to stand in for its result) is
    raised while tracing: Dynamo reports it as torch._dynamo.exc.Unsupported under fullgraph=True, and without
    fullgraph runs the call eagerly, where jaxtyping raises it."""
    return (
        message.replace("{}", "?").replace("{{", "{").replace("}}", "}")
        + "\n(under torch.compile a violated contract stays in the graph only for functions returning tensors)"
    )


def _spec(contract: Contract) -> tuple:
    """The contract's tables. Read through ``assume_constant_result``, Dynamo takes them as constants, with no guard
    on their contents (they never change): one identity guard per contract instead of one guard per entry."""
    return contract.spec


# = torch.compiler.assume_constant_result(_spec), which sets just this attribute but imports Dynamo first (about a
# second at import, in every process, compiling or not). tests/test_contracts.py checks the two agree.
_spec._dynamo_marked_constant = True  # type: ignore[attr-defined]


def call_traced(contract: Contract, fn: Callable, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)`` under its contract, as Dynamo traces it (see the comment above)."""
    qualname, params, checks, result = _spec(contract)
    _TRACE_CALLS.append(qualname)
    try:
        bound, given = bind_arguments(params, args, kwargs, contract)
        single: dict = {}
        variadic: dict = {}
        memo = [single, variadic]
        failure = None
        for name, hint, expected, fields in checks:
            if name not in given:
                continue
            if failure is not None:  # the other arguments still name sizes, for the placeholder's shape
                note_sizes(hint, given[name], memo[0])
            elif not fits(hint, given[name], memo, bound, contract):
                failure = _describe("argument '" + name + "'", given[name], expected, single, variadic, fields, bound)
        if failure is None:
            out = fn(*args, **kwargs)
            if result is None or fits(result[0], out, memo, bound, contract):
                return out
            failure = _describe("the return value", out, result[1], single, variadic, result[2], bound)
        template, sizes = failure
        message = " > ".join(_TRACE_CALLS) + ": " + template
    finally:
        _TRACE_CALLS.pop()
    if result is None:
        raise TypeCheckError(_unformatted(message))
    return _placeholder(result[0], message, sizes, memo, bound)
