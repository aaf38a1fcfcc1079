"""The contract checker that runs while torch.compile traces (see "torch.compile" in docs/contracts.md).

jaxtyping cannot check while Dynamo traces: its checks misfire on the fake tensors Dynamo traces with
(pytorch#122093, jaxtyping#196). ``transformer.contracts.checked`` hands such calls to :func:`call_traced`, which
checks the same annotations (read once, by :class:`Contract`) in plain Python that Dynamo traces into the graph's
guards, and raises a violation through an operator whose fake version raises the eager ``TypeCheckError`` (the same
first line) while the call is traced. No graph break, and no check left in a valid graph.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import AnnotationError, TypeCheckError

from ..common.graph_errors import RaisedWhileTracing, raising_operator
from .frames import TRACED
from .grammar import UnsupportedAnnotation, destring, hint_fields, parse_hint
from .report import TENSOR_NAME, annotation_text, call_site_name, describe, escape_braces, expected_text
from .traced_rules import bind_arguments, field_value, fits, readable_field

# jaxtyping cannot run while Dynamo traces (its checks misfire on fake tensors, pytorch#122093), and a Python
# exception raised while tracing reaches the user as torch._dynamo.exc.Unsupported ("Observed exception") under
# fullgraph=True. So while compiling, `checked` runs `call_traced`: plain Python over the annotations parsed once by
# `Contract`, which Dynamo traces like the model's own code. With static shapes every comparison is a constant; with
# dynamic shapes each one becomes a guard on the symbolic sizes (or is already decided by them), so a valid graph
# holds no check at all. A violation is raised by calling `contract_violation`, an operator whose fake version (run
# by Dynamo at once, for real) raises the TypeCheckError with the sizes of the call being traced, as a
# `CompiledContractError`: Dynamo hands that on unchanged (see transformer.common.graph_errors), and nothing after
# the violated call is traced, so no later operation can fail first on a tensor of the wrong shape.

_EMPTY = inspect.Parameter.empty
_TRACE_CALLS: list[str] = []  # the checked calls being traced, outermost first: "Outer > Inner: ..." as in eager

_COMPILED_NOTE = (
    "\n(raised while torch.compile traced this call: typed-transformer checks contracts on the sizes being traced; "
    "run it eagerly for jaxtyping's full report)"
)


class CompiledContractError(TypeCheckError, RaisedWhileTracing):
    """A contract violated by a call that torch.compile traces: a ``jaxtyping.TypeCheckError`` with eager mode's
    first line (and an ``IndexError``, the one kind of error Dynamo hands on unchanged from a fake implementation)."""


class CompiledAnnotationError(AnnotationError, RaisedWhileTracing):
    """jaxtyping's ``AnnotationError`` (an annotation that cannot be checked, such as a symbolic size naming a
    dimension no earlier argument bound), raised while torch.compile traces the call, with eager mode's first line."""


#: at the start of an operator message: the error is an AnnotationError, not a contract violation
ANNOTATION_ERROR = "\x01"


def _note() -> str:
    """The note under a traced violation: torch.export's trace, or torch.compile's."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    if is_exporting is not None and is_exporting():
        return _COMPILED_NOTE.replace("torch.compile traced", "torch.export traced", 1)
    return _COMPILED_NOTE


def _violation_error(message: str, sizes: list) -> TypeCheckError | AnnotationError:
    """The contract error (``message`` with ``{}`` for each size), raised while the call is traced."""
    if message.startswith(ANNOTATION_ERROR):
        return CompiledAnnotationError(message[1:].format(*sizes) + _note())
    text = message.format(*sizes)
    if TENSOR_NAME in text:  # a check(...) given no name: the source of its argument, read from the traced stack
        from torch._guards import TracingContext

        text = text.replace(TENSOR_NAME, call_site_name(TracingContext.extract_stack()))
    return CompiledContractError(text + _note())


_contract_violation = raising_operator("contract_violation_traced", _violation_error, while_tracing=True)


def raise_traced(message: str, sizes: list) -> None:
    """Raise the contract error ``message.format(*sizes)`` from code that Dynamo traces (see the comment above)."""
    _contract_violation(message, sizes, [0], torch.float32, torch.device("cpu"), None)
    raise AssertionError("typed_transformer::contract_violation_traced returned while tracing")


class Contract:
    """``fn``'s signature and annotations, read once, as the traced checker needs them."""

    __slots__ = (
        "_classes",
        "all_fields",
        "checks",
        "classes",
        "defaults",
        "fields",
        "params",
        "qualname",
        "read_spec",
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
                    position if positional or p.kind == p.VAR_POSITIONAL else -1,  # (*args: where they start)
                    p.kind == p.VAR_POSITIONAL,
                    p.kind == p.VAR_KEYWORD,
                    p.default is not _EMPTY,
                )
            )
            annotation = p.annotation
            if annotation is not _EMPTY and not resolved:
                annotation = destring(annotation, fn.__globals__)
            hint = self._hint(annotation, p.name)
            if hint is not None and p.kind == p.VAR_POSITIONAL:  # beartype checks every item of *args
                hint = ("tuple_of", hint)
            elif hint is not None and p.kind == p.VAR_KEYWORD:  # and every value of **kwargs
                hint = ("dict", ("any",), hint)
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
        #: every field the annotations read, (name, attributes): their values decide whether a call is traced
        self.all_fields = tuple(dict.fromkeys(f for fields in self.fields.values() for f in fields))
        self.spec = (self.qualname, self.params, self.checks, self.result, self.all_fields, bool(self.unsupported))
        self.read_spec = _constant_reader(self.spec)
        self.classes = tuple(self._classes)
        self.defaults = tuple(p.default for p in signature.parameters.values())

    def _hint(self, annotation: object, name: str) -> tuple | None:
        try:
            return parse_hint(annotation, self._classes)
        except UnsupportedAnnotation as error:
            self.unsupported.append(f"{name}: {error}")
            return None


def _constant_reader(spec: tuple) -> Callable[[], tuple]:
    """A function of no arguments that returns ``spec``, marked as ``torch.compiler.assume_constant_result`` marks
    one: Dynamo calls it for real and takes the tables as constants, with no guard on their contents (they never
    change), so each contract costs one guard instead of one guard per entry. It takes no argument because Dynamo
    before torch 2.13 can pass an assume-constant function only constants (a ``Contract`` there fails with
    ``AsPythonConstantNotImplementedError``)."""

    def read_spec() -> tuple:
        if not _FALLBACK:  # (Dynamo runs this for real, while it traces: Dynamo is imported by then)
            eager_fallback()
        return spec

    # = torch.compiler.assume_constant_result(read_spec), which sets just this attribute but imports Dynamo first
    # (about a second at import, in every process, compiling or not). tests/test_contracts_compiled.py checks the two
    # agree.
    read_spec._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return read_spec


def checked_eagerly(eager: Callable, args: tuple, kwargs: dict):
    """The eager checked call, ``eager(*args, **kwargs)``, run outside the graph: for a contract (or a call) the
    traced checker cannot decide exactly as jaxtyping. ``torch.compiler.disable``d where it is first needed
    (:func:`eager_fallback`): a graph break, or under ``fullgraph=True`` Dynamo's ``Unsupported`` with the reason."""
    return eager(*args, **kwargs)


_REASON = (
    "typed-transformer: this contract holds an annotation (or this call a {self.x} field value) that its traced "
    "checker does not read exactly as jaxtyping does, so the call is checked eagerly, by jaxtyping and beartype, "
    "outside the graph (see 'Limits' under torch.compile in docs/contracts.md)"
)
_FALLBACK: list[Callable] = []


def eager_fallback() -> Callable:
    """:func:`checked_eagerly`, disabled for Dynamo: made once, by the first ``read_spec`` that Dynamo runs (for
    real, not traced: so neither at import, where importing Dynamo would cost seconds, nor inside a trace)."""
    if not _FALLBACK:
        import torch._dynamo

        _FALLBACK.append(torch._dynamo.disable(checked_eagerly, reason=_REASON))
    return _FALLBACK[0]


def call_traced(contract: Contract, fn: Callable, args: tuple, kwargs: dict, eager: Callable | None = None):
    """``fn(*args, **kwargs)`` under its contract, as Dynamo traces it (see the comment above). ``eager``: the
    checked function, called outside the graph where the traced checker cannot decide the call exactly."""
    qualname, params, checks, result, all_fields, unsupported = contract.read_spec()
    if eager is not None and unsupported:  # an annotation the traced checker cannot read: never dropped
        return _FALLBACK[0](eager, args, kwargs)
    bound, given = bind_arguments(params, args, kwargs, contract)
    if eager is not None:
        for value in given.values():  # a numpy array: Dynamo traces it as a tensor, which would pass for one
            if isinstance(value, np.ndarray):
                return _FALLBACK[0](eager, args, kwargs)
        for name, attributes in all_fields:
            if not readable_field(field_value(bound, name, attributes)):
                return _FALLBACK[0](eager, args, kwargs)
    _TRACE_CALLS.append(qualname)
    try:
        single: dict = {}
        variadic: dict = {}
        memo = [single, variadic]
        for name, hint, expected, fields in checks:
            if name in given and not fits(hint, given[name], memo, bound, contract):
                if eager is not None and isinstance(given[name], torch.SymFloat):  # (not writable while traced)
                    return _FALLBACK[0](eager, args, kwargs)
                raise_in_traced_call(
                    describe("argument '" + name + "'", given[name], expected, single, variadic, fields, bound)
                )
        TRACED.append((memo, bound))  # what a check(...) inside fn binds with
        try:
            out = fn(*args, **kwargs)
        finally:
            TRACED.pop()
        if result is not None and not fits(result[0], out, memo, bound, contract):
            raise_in_traced_call(describe("the return value", out, result[1], memo[0], memo[1], result[2], bound))
        return out
    finally:
        _TRACE_CALLS.pop()


def raise_in_traced_call(failure: tuple[str, list]) -> None:
    """Raise a violation found in the checked call traced innermost (``describe``'s template and sizes), with the
    names of the calls being traced before it, as eager mode writes them."""
    template, sizes = failure
    raise_traced(" > ".join(_TRACE_CALLS) + ": " + template, sizes)
