"""``check``: a contract on a tensor inside a checked function, bound to the same dimension names as the call.

A shape bug inside a forward (q, k and v reshaped with heads and head_dim swapped, a transpose forgotten before
``view``) often keeps every shape at the function's boundaries, so no signature can see it. jaxtyping's answer is
``assert isinstance(q, Float[Tensor, "..."])`` inside a ``jaxtyped`` function: the check shares the call's memo of
dimension sizes. ``check(q, "batch {self.n_head} seq head_dim")`` is the same inside a ``checked`` one: names bound
by the signature must agree, a new name is bound for later checks and for the return value, ``{self.x}`` reads the
enclosing call's arguments, and a failure names the tensor and the axis. In eager mode it reads the call's frame
(``transformer.contracts.frames``); while torch.compile traces, the traced call's memo, and raises through the traced
checker's operator, with the same first line (no graph break). Outside a checked call it refuses: it would have no
names to bind with.
"""

from __future__ import annotations

import traceback
import typing

import torch
from jaxtyping import TypeCheckError

from .frames import EAGER, TRACED
from .grammar import UnsupportedAnnotation, hint_fields, parse_dims, parse_hint
from .report import (
    TENSOR_NAME,
    CheckFailure,
    annotation_text,
    call_site_name,
    describe,
    escape_braces,
    expected_text,
)
from .switch import CHECKS
from .traced import raise_in_traced_call, raise_traced
from .traced_rules import bind_arguments, evaluate, fits

T = typing.TypeVar("T")
_READER, _TRACE_STACK = CHECKS.reader, CHECKS.trace_stack
_PARSED: dict = {}


def check(x: T, annotation: str | type, name: str | None = None) -> T:
    """Check ``x`` against ``annotation`` with the dimension names of the checked call it is made in; return ``x``.

    ``annotation``: a dimension string in jaxtyping's grammar (``"batch {self.n_head} seq head_dim"``, ``#name``,
    ``*name``, ``...``, ``_``, fixed sizes, ``steps+1``; any dtype), or a jaxtyping annotation that also fixes the
    dtype kind (``Float[Tensor, "batch seq"]``, ``Float[Tensor, "b n"] | None``). ``name``: what the error calls
    the tensor; by default the source of ``check``'s first argument at the call site (``q``).

    A name the call has bound (by its arguments or an earlier check) must have the same size here; a new one is
    bound, for later checks and for the call's return value. A violation raises ``jaxtyping.TypeCheckError``:
    ``CausalSelfAttention.forward: tensor 'q' is f32[2,16,8,4], expected 'batch {self.n_head} seq head_dim'
    (self.n_head=4) with batch=2, seq=8; axis 1 ({self.n_head}) is 16, expected 4``. With checks off it
    returns at once. Called outside a ``checked`` call (with checks on), it raises ``TypeCheckError`` saying so.
    """
    enabled = _READER.value
    if enabled is _READER:
        enabled = CHECKS.default
    if _TRACE_STACK:
        enabled = _TRACE_STACK[-1]
    if not enabled:
        return x
    parsed = _parsed(annotation)
    if torch.compiler.is_compiling():
        if not TRACED:
            raise_traced(escape_braces(_outside(annotation)), [])
        memo, bound = TRACED[-1]
        if not fits(parsed[0], x, memo, bound, None):
            raise_in_traced_call(_failure(parsed, x, memo, bound, name))
        return x
    frames = EAGER.frames
    if not frames:
        raise TypeCheckError(_outside(annotation))
    frame = frames[-1]
    if frame[3] is None:
        _bind_call(frame)
    if not fits(parsed[0], x, frame[3], frame[4], None):
        template, sizes = _failure(parsed, x, frame[3], frame[4], name)
        text = template.format(*sizes)
        if TENSOR_NAME in text:
            text = text.replace(TENSOR_NAME, call_site_name(traceback.extract_stack()))
        raise CheckFailure(text)
    return x


def check_return(frame: list, out: object, qualname: str) -> None:
    """The return value of the eager call ``frame`` against its annotation, with the names its checks bound too."""
    contract, memo, bound = frame[0], frame[3], frame[4]
    if contract.result is not None and not fits(contract.result[0], out, memo, bound, contract):
        template, sizes = describe("the return value", out, contract.result[1], *memo, contract.result[2], bound)
        raise TypeCheckError(qualname + ": " + template.format(*sizes))


def _bind_call(frame: list) -> None:
    """The sizes the eager call's arguments bind (they passed its contract), and its arguments by name."""
    contract, args, kwargs = frame[0], frame[1], frame[2]
    bound, given = bind_arguments(contract.params, args, kwargs, contract)
    memo: list = [{}, {}]
    for name, hint, _, _ in contract.checks:
        if name in given:
            fits(hint, given[name], memo, bound, contract)
    frame[3], frame[4] = memo, bound


def _outside(annotation: object) -> str:
    return (
        f"check(..., {annotation!r}) was called outside a @checked call: it checks a tensor against the dimension "
        "names of the checked call it is made in; decorate the function that calls it with transformer.checked"
    )


def _parsed(annotation: str | type) -> tuple:
    """(hint, expected text, the fields it reads, its axes as written), read once per annotation. Dynamo calls it
    for real and takes the result as a constant (as for the contracts' tables, ``Contract.read_spec``)."""
    found = _PARSED.get(annotation)
    if found is None:
        found = _PARSED[annotation] = _parse(annotation)
    return found


_parsed._dynamo_marked_constant = True  # type: ignore[attr-defined]  # = torch.compiler.assume_constant_result


def _parse(annotation: str | type) -> tuple:
    try:
        if isinstance(annotation, str):
            hint = ("array", None, *parse_dims(annotation))
            return hint, escape_braces(repr(annotation)), hint_fields(hint), tuple(annotation.split())
        classes: list = []
        hint = parse_hint(annotation, classes)
    except UnsupportedAnnotation as error:
        raise ValueError(f"check: cannot read the annotation {annotation!r}: {error}") from None
    alternatives = hint[1] if hint is not None and hint[0] == "union" else (hint,)
    kinds = [None if h is None else h[0] for h in alternatives]
    if classes or "array" not in kinds or any(kind not in ("array", "none") for kind in kinds):
        raise TypeError(
            "check: annotation must be a dimension string or a jaxtyping tensor annotation (Float[Tensor, '...'], "
            f"optionally | None), got {annotation!r}"
        )
    tokens = tuple(annotation.dim_str.split()) if hint[0] == "array" else ()
    return hint, escape_braces(expected_text(annotation_text(annotation))), hint_fields(hint), tokens


def _failure(parsed: tuple, x: object, memo: list, bound: dict, name: str | None) -> tuple[str, list]:
    """The summary line of a failed check (``describe``'s, with the sizes bound before it) and the axis that broke."""
    hint, expected, fields, tokens = parsed
    subject = "tensor '" + (TENSOR_NAME if name is None else escape_braces(name)) + "'"
    template, sizes = describe(subject, x, expected, memo[0], memo[1], fields, bound)
    if hint[0] == "array" and isinstance(x, torch.Tensor):
        detail = _broken_axis(hint, tokens, x, dict(memo[0]), memo[1], bound, sizes)
        if detail:
            template += "; " + detail
    return template, sizes


def _broken_axis(hint: tuple, tokens: tuple, x: torch.Tensor, single: dict, variadic: dict, bound: dict, sizes: list):
    """The first axis (in jaxtyping's order of comparison) whose size breaks ``hint``, as a template."""
    allowed, dims, i = hint[1], hint[2], hint[3]
    if allowed is not None and x.dtype not in allowed:
        return "its dtype " + str(x.dtype).replace("torch.", "") + " is not one the annotation allows"
    rank = x.dim()
    if i < 0 and rank != len(dims):
        return "it has " + str(rank) + " axes, expected " + str(len(dims))
    if i >= 0 and rank < len(dims) - 1:
        return "it has " + str(rank) + " axes, expected at least " + str(len(dims) - 1)
    after = len(dims) - i - 1
    axes = list(range(len(dims))) if i < 0 else [*range(i), -1, *range(rank - after, rank)]
    for dim, token, axis in zip(dims, tokens, axes, strict=False):  # (one token per axis annotation)
        kind, value, broadcastable = dim[:3]
        if axis < 0 or kind == "anon" or (broadcastable and x.shape[axis] == 1):
            continue
        size = x.shape[axis]
        if kind == "fixed":
            expected = value
        elif kind == "symbolic":
            expected = evaluate(value, single, bound)
        elif value in single:
            expected = single[value]
        else:
            single[value] = size
            continue
        if size != expected:
            sizes.extend((size, expected))
            return "axis " + str(axis) + " (" + escape_braces(token) + ") is {}, expected {}"
    if i >= 0 and dims[i][0] == "var" and dims[i][1] in variadic:
        shape, previous = tuple(x.shape[i : rank - after]), variadic[dims[i][1]][1]
        sizes.extend((*shape, *previous))
        inner = ", ".join(["{}"] * len(shape)), ", ".join(["{}"] * len(previous))
        return (
            "axes "
            + str(i)
            + " to "
            + str(rank - after - 1)
            + " ("
            + escape_braces(tokens[i])
            + ") are ("
            + (inner[0] + "), expected (" + inner[1] + ")")
        )
    return ""
