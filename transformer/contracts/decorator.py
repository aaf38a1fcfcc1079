"""``checked``: the one decorator that holds a function to its jaxtyping annotations, eagerly and under torch.compile.

A checked call reads the switch (``transformer.contracts.switch``); when checks are on, eager calls go to the fast
checker (``transformer.contracts.fast``, falling back to jaxtyping + beartype for the report,
``transformer.contracts.report``), and calls being traced by torch.compile to the traced checker
(``transformer.contracts.traced``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch
from jaxtyping import TypeCheckError

from .fast import NotFast, compile_checker
from .frames import EAGER
from .grammar import resolved_signature
from .report import CheckFailure, Reporter, field_text, located
from .switch import CHECKS
from .traced import Contract, call_traced
from .within import check_return

F = TypeVar("F", bound=Callable)
# the switch as the wrapper reads it, inline (see transformer.common.switches): the cheapest read there is
_READER, _TRACE_STACK = CHECKS.reader, CHECKS.trace_stack
_NO_RESULT = object()

#: Called as ``hook(qualname, part)`` when the eager fast path refused a call that jaxtyping then accepted (``part``:
#: "arguments" or "return"): never, if the fast path decides as jaxtyping does. For tests and debugging.
_on_fast_path_miss: Callable[[str, str], None] | None = None


def checked(fn: F) -> F:
    """Check ``fn``'s jaxtyping annotations at every call while checks are on, with jaxtyping's and beartype's rules.

    Dimension names are bound across the arguments and the return value of one call, so
    ``(x: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq d_model"]``
    promises the output keeps the input's shape. A violation raises
    ``jaxtyping.TypeCheckError`` naming the argument, the expected type, the actual
    shape and the sizes bound so far (and the values of ``{self.x}`` fields the annotation reads).

    In eager mode the annotations are read once, here, and compiled into a small Python checker
    (``transformer.contracts.fast``: about a microsecond per call); a call it does not find valid is handed to
    jaxtyping and beartype themselves, which raise the error with their full report. Annotations the fast checker
    does not replicate exactly (e.g. ``Sequence[int]``) are left to jaxtyping at every call.

    While torch.compile traces, the same annotations are checked by ``transformer.contracts.traced`` (read from the
    annotations once, here), on the shapes Dynamo traces with; a violation becomes an operator in the graph that
    raises the same ``TypeCheckError`` with the same first line when the graph runs. See docs/contracts.md.

    ``transformer.contracts.check(x, "dims")`` inside ``fn`` checks an intermediate tensor against the same
    dimension names (``transformer.contracts.within``); the names it binds hold for the return value too.

    ``fn.unchecked`` is the bare function, for calls on the hot path whose shapes the calling
    function's own contract has just checked (e.g. ``MultiHeadedAttention.attend`` calling
    ``scaled_dot_product_attention``): the same guarantee without paying for it twice.
    """
    signature = resolved_signature(fn)  # the annotations evaluated once, as jaxtyping evaluates them
    contract = Contract(fn, signature)
    reporter = Reporter(fn, signature)
    qualname = fn.__qualname__

    def fields(args: tuple, kwargs: dict) -> Callable[[str], str]:
        def text(subject: str) -> str:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return ""
            bound.apply_defaults()
            return field_text(contract.fields.get(subject, ()), bound.arguments)

        return text

    def report(args: tuple, kwargs: dict, out: object = _NO_RESULT):
        """jaxtyping's check of the call (of its result ``out``, when given: ``fn`` is not called again)."""
        return reporter.run(args, kwargs) if out is _NO_RESULT else reporter.run(args, kwargs, out)

    def missed(args: tuple, kwargs: dict, out: object = _NO_RESULT):
        result = report(args, kwargs, out)
        if _on_fast_path_miss is not None:
            _on_fast_path_miss(qualname, "arguments" if out is _NO_RESULT else "return")
        return result

    def fast_checker() -> tuple[Callable, str]:
        """The eager checker, generated at the first checked call (not at import): (checker, why not the fast one)."""
        nonlocal eager, not_fast
        if eager is first_call:
            try:
                eager, not_fast = compile_checker(fn, signature, missed, missed), ""
            except NotFast as reason:  # an annotation the fast checker does not replicate: jaxtyping checks every call
                eager, not_fast = report, str(reason)
        return eager, not_fast

    def first_call(args: tuple, kwargs: dict):
        return fast_checker()[0](args, kwargs)

    eager, not_fast = first_call, ""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        enabled = _READER.value
        if enabled is _READER:
            enabled = CHECKS.default
        if _TRACE_STACK:
            enabled = _TRACE_STACK[-1]
        if enabled:
            if torch.compiler.is_compiling():
                return call_traced(contract, fn, args, kwargs, wrapper)
            frame = [contract, args, kwargs, None, None]  # what a check(...) inside fn binds with (transformer.check)
            frames = EAGER.frames
            frames.append(frame)
            try:
                out = eager(args, kwargs)
            except CheckFailure as failure:  # a check(...) inside fn
                raise TypeCheckError(qualname + ": " + str(failure)) from None
            except TypeCheckError as error:  # this call's, or a nested call's: located, with the caller's name
                raise TypeCheckError(located(qualname, str(error), fields(args, kwargs))) from None
            finally:
                frames.pop()
            if frame[3] is not None:  # a check(...) inside fn bound names: the return value answers to them too
                check_return(frame, out, qualname)
            return out
        return fn(*args, **kwargs)

    wrapper.unchecked = fn  # for hot inner calls whose caller's contract already covers these shapes
    wrapper._contract = contract  # the annotations as the compiled-mode checker reads them
    wrapper._fast_checker = fast_checker  # (the eager checker, why jaxtyping checks every call: "" if it does not)
    wrapper._jaxtyping = report  # jaxtyping + beartype, as every call was checked before the fast path
    return wrapper  # type: ignore[return-value]
