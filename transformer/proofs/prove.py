"""``prove``: every contract of a model decided for every size in given ranges, by exporting it with symbolic sizes.

The example inputs' axes that carry the contract's dimension names (``batch``, ``seq``, ...) become symbolic over the
ranges (``torch.export.Dim``), the checks are on, and the model is exported (``torch.export.export``, non-strict).
Every comparison of a contract (``transformer.contracts.traced_rules``) and of the model's code on those sizes is
then either decided by torch's symbolic shape reasoning for every size in the ranges, or adds a guard
(:mod:`transformer.proofs.guards`): the traced program, and so the contract, holds only where the guard does. A guard
that some size in the ranges (and the assumptions) breaks is a counterexample; the report re-runs the call eagerly at
such sizes to show the ordinary contract error. See docs/proved-shapes.md.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import TypeCheckError
from torch import nn

from ..contracts import checks
from .cases import by_cases
from .guards import Guard, GuardRecorder
from .report import CallReport, Counterexample, ProofReport
from .sizes import Assumption, check_ranges, counterexample, relation_text
from .structures import dynamic_tree, inputs_at, is_structure, leaf_axes, leaves

_SOURCE = re.compile(r"^L\['(?P<arg>[^']+)'\](?P<path>.*?)\.size\(\)\[(?P<axis>\d+)\]$")


class _Function(nn.Module):
    """A function as a module, for ``torch.export`` (which exports modules): its forward is the function."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.forward = fn  # export reads the function's own signature (names for dynamic_shapes)


def checked_function(target: nn.Module | Callable) -> Callable:
    """The checked function a proof of ``target`` starts from: a module's ``forward``, or the function itself."""
    fn = type(target).forward if isinstance(target, nn.Module) else target
    if getattr(fn, "_contract", None) is None:
        raise ValueError(
            f"prove: {getattr(fn, '__qualname__', fn)!r} is not a checked function (decorate it with "
            "transformer.checked): its contract names the sizes to prove over"
        )
    return fn


def _array_hint(hint: tuple, value: torch.Tensor) -> tuple | None:
    """The tensor annotation (of ``hint`` or of one of its alternatives) that ``value``'s rank can match."""
    if hint[0] == "array":
        dims, i = hint[2], hint[3]
        return hint if (len(dims) == value.dim() if i < 0 else value.dim() >= len(dims) - 1) else None
    if hint[0] == "union":
        for alternative in hint[1]:
            found = _array_hint(alternative, value)
            if found is not None:
                return found
    return None


def axis_names(fn: Callable, bound: dict) -> dict[str, dict[int, tuple[str, bool]]]:
    """Per tensor argument, ``{axis: (dimension name, broadcastable)}`` for the axes its annotation names."""
    named: dict[str, dict[int, tuple[str, bool]]] = {}
    for name, hint, _, _ in fn._contract.checks:
        value = bound.get(name)
        if not isinstance(value, torch.Tensor):
            continue
        array = _array_hint(hint, value)
        if array is None:
            continue
        dims, i = array[2], array[3]
        positions = (
            list(range(len(dims))) if i < 0 else [*range(i), -1, *range(value.dim() - (len(dims) - i - 1), value.dim())]
        )
        for dim, axis in zip(dims, positions, strict=True):
            if dim[0] == "named" and axis >= 0:
                named.setdefault(name, {})[axis] = (dim[1], dim[2])
    return named


def prove(
    target: nn.Module | Callable,
    *example_args,
    sizes: dict[str, tuple[int, int]],
    assume: tuple[str, ...] | list[str] = (),
    axes: dict[str, tuple[str | None, ...]] | None = None,
    rerun: bool = True,
    cases: tuple[str, ...] | list[str] | str = (),
    **example_kwargs,
) -> ProofReport:
    """Decide every contract of ``target(*example_args, **example_kwargs)`` for every size in ``sizes``.

    ``sizes`` maps the contract's dimension names (those of ``target``'s own signature: ``{"batch": (1, 64),
    "seq": (1, 512)}``) to inclusive ranges; the example inputs' axes with those names become symbolic (an axis
    ``#name`` of size 1 stays 1: it broadcasts). ``assume``: relations taken as given (``"k_len == seq"`` makes
    the two one size; ``"seq <= 512"`` bounds one; others, such as ``"q_len <= k_len"``, restrict the sizes a
    counterexample may have). ``axes`` names the axes of an argument whose annotation names none
    (``mask: Bool[Tensor, "..."]``): ``{"mask": ("batch", "q_len", "k_len")}``. Returns a
    :class:`~transformer.proofs.report.ProofReport`; ``rerun`` re-runs each counterexample eagerly, checks on, for
    its contract error. ``cases`` (``["seq <= 3", "seq >= 4"]``): relations that together cover the ranges, each
    proved on its own (:mod:`transformer.proofs.cases`; the example inputs are resized into each case); ``"split"``
    finds them where the model's code branches on a size. Bad input (a
    name no axis carries, an example outside its range, a relation it cannot read, cases that leave a size out)
    raises ``ValueError`` naming it.
    """
    started = time.perf_counter()
    if cases:
        cases = [cases] if isinstance(cases, str) else list(cases)
        return by_cases(target, example_args, example_kwargs, sizes, assume, axes, rerun, cases, started)
    plan = plan_export(target, example_args, example_kwargs, sizes, assume, axes)
    fn, module, named, alias, ranges = plan.fn, plan.module, plan.named, plan.alias, plan.ranges
    examples, bound, assumptions = plan.examples, plan.bound, plan.assumptions
    args, kwargs, dynamic_shapes = plan.args, plan.kwargs, plan.dynamic_shapes
    failure, unbacked = "", []
    with checks(True), GuardRecorder() as recorder:
        export_started = time.perf_counter()
        try:
            program = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
            unbacked = sorted(str(s) for s in program.range_constraints if str(s).startswith("u"))
        except TypeCheckError as error:  # a contract broken at the example sizes
            failure = "the example inputs break a contract: " + str(error).splitlines()[0]
        except Exception as error:  # noqa: BLE001 - a constraint violation is read from the guards below
            if not _is_constraint_violation(error):
                failure = f"torch.export could not trace the call: {type(error).__name__}: {_first_lines(error)}"
        export_seconds = time.perf_counter() - export_started
    names = _symbol_names(recorder, named, alias)
    top = fn._contract.qualname
    calls = _calls(recorder, top)
    counterexamples = []
    for guard in recorder.guards:
        chain = " > ".join(guard.calls) or top
        report = calls.get(chain) or calls.setdefault(chain, CallReport(chain, "", 1, ()))
        if guard.kind == "runtime_assert":
            report.asserted.append(relation_text(guard.expr, names))
            continue
        if report.counterexample is not None:
            continue  # the first counterexample of each call
        broken = counterexample(guard.expr, names, ranges, examples, assumptions)
        if broken is None:
            continue
        found = Counterexample(chain, _by(guard), relation_text(guard.expr, names), broken, guard.where, guard.source)
        if rerun:
            found.eager = rerun_eagerly(target, bound, named, alias, broken, fn)
        report.counterexample = found
        counterexamples.append(found)
    if rerun and not failure and not counterexamples:
        counterexamples += _low_ends(target, fn, bound, named, alias, ranges, examples, assumptions, calls, top)
    not_covered = [
        "tensor values (token ids, mask contents), and branches on them: only sizes are symbolic",
        "sizes outside the ranges, and axes no size name marks (they keep the example's size)",
    ]
    if unbacked:  # sizes read from tensor values (x[mask], nonzero): the contracts hold for whatever they are
        not_covered.append(
            f"data-dependent sizes ({', '.join(unbacked)}): a contract's name bound to one holds for any value; "
            "what the values are is not proved"
        )
    return ProofReport(
        getattr(fn, "__qualname__", str(fn)),
        {n: ranges[n] for n in ranges if n not in alias},
        [a.text for a in assumptions],
        list(calls.values()),
        counterexamples,
        failure,
        export_seconds,
        time.perf_counter() - started,
        not_covered,
    )


@dataclass
class ExportPlan:
    """What ``torch.export.export`` is called with to trace ``fn`` over the ranges (see :func:`plan_export`)."""

    fn: Callable
    module: nn.Module
    bound: dict
    named: dict
    alias: dict
    ranges: dict
    examples: dict
    assumptions: list
    args: tuple
    kwargs: dict
    dynamic_shapes: dict


def plan_export(target, example_args: tuple, example_kwargs: dict, sizes: dict, assume, axes=None) -> ExportPlan:
    """The module, inputs and ``dynamic_shapes`` that export ``target`` with the axes named in ``sizes`` symbolic
    (``axes``: names for the axes of arguments whose annotation names none, as :func:`prove` takes them)."""
    check_ranges(sizes)
    fn = checked_function(target)
    module = target if isinstance(target, nn.Module) else _Function(target)
    signature = inspect.signature(fn)
    call = (target, *example_args) if isinstance(target, nn.Module) else example_args
    try:
        bound = signature.bind(*call, **example_kwargs).arguments
    except TypeError as error:
        raise ValueError(f"prove: the example inputs do not fit {fn.__qualname__}{signature}: {error}") from None
    assumptions = [Assumption(a) for a in assume]
    ranges, alias = _ranges(sizes, assumptions)
    named = axis_names(fn, bound)
    tensors = {n: v for n, v in bound.items() if isinstance(v, torch.Tensor)}
    for arg, value in bound.items():  # an AttentionMask, a cache: their tensors' axes by the parts' names
        if is_structure(value):
            for leaf, tensor in leaves(arg, value).items():
                tensors[leaf] = tensor
                named[leaf] = leaf_axes(leaf, tensor, axes)
    for arg, dims in (axes or {}).items():
        if arg not in tensors or len(dims) != tensors[arg].dim():
            raise ValueError(
                f"prove: axes[{arg!r}] = {dims!r} must name each axis of a tensor argument {arg!r} (or of a part "
                f"of a structured one: {sorted(n for n in tensors if n not in bound)})"
            )
        if arg in bound:
            named[arg] = {i: (d, False) for i, d in enumerate(dims) if d is not None}
    examples, _, dynamic = _dims(named, tensors, ranges, alias, fn)
    for unknown in set(sizes) - {alias.get(n, n) for n in examples} - set(alias):
        carried = sorted({n for axes in named.values() for n, _ in axes.values()})
        raise ValueError(
            f"prove: no axis of the example inputs carries {unknown!r}; {fn.__qualname__}'s inputs carry {carried}"
        )
    given = [n for n in signature.parameters if n in bound and n != "self"]
    keyword = {n for n in given if signature.parameters[n].kind == inspect.Parameter.KEYWORD_ONLY}
    args = tuple(bound[n] for n in given if n not in keyword)
    kwargs = {n: bound[n] for n in given if n in keyword}
    dynamic_shapes = {
        n: dynamic_tree(bound[n], n, dynamic) if is_structure(bound[n]) else dynamic.get(n) for n in given
    }
    return ExportPlan(fn, module, bound, named, alias, ranges, examples, assumptions, args, kwargs, dynamic_shapes)


def _low_ends(target, fn, bound, named, alias, ranges, examples, assumptions, calls, top) -> list[Counterexample]:
    """Counterexamples at the low ends of the ranges, found by running eagerly: torch traces some operations
    size-obliviously (``squeeze()``, broadcasting: a symbolic size is taken not to be 1, with no guard), so the traced
    program holds there while eager code takes another path. Tried: every name at its low end, and each alone."""
    names = [n for n in examples if n in ranges]
    tries = [dict(examples, **{n: ranges[n][0]}) for n in names]
    tries.append(dict(examples, **{n: ranges[n][0] for n in names}))
    found: list[Counterexample] = []
    for sizes in tries:
        if sizes == examples or not all(a.holds(sizes) for a in assumptions if set(a.names) <= set(sizes)):
            continue
        outcome = rerun_eagerly(target, bound, named, alias, sizes, fn)
        if outcome.startswith("no error"):
            continue
        low = " or ".join(f"{n} != {sizes[n]}" for n in names if sizes[n] != examples[n])
        report = calls.get(top) or calls.setdefault(top, CallReport(top, "", 1, ()))
        found.append(Counterexample(top, "an eager run at the low ends of the ranges", low, sizes, "", ""))
        found[-1].eager = outcome
        if report.counterexample is None:
            report.counterexample = found[-1]
        break  # the first
    return found


def _ranges(sizes: dict, assumptions: list[Assumption]) -> tuple[dict, dict]:
    """The ranges after the assumptions that bound a name; ``alias``: name -> the name it equals."""
    ranges, alias = dict(sizes), {}
    for assumption in assumptions:
        pair = assumption.alias()
        if pair is not None:
            a, b = pair
            if a not in ranges and b in ranges:
                a, b = b, a
            if b not in ranges:
                alias[b] = a
            else:
                alias[a] = b
                lo = max(ranges[a][0], ranges[b][0])
                hi = min(ranges[a][1], ranges[b][1])
                ranges[b] = (lo, hi)
            continue
        bound = assumption.bound()
        if bound is not None and bound[0] in ranges:
            name, op, n = bound
            lo, hi = ranges[name]
            if op in ("<=", "<"):
                hi = min(hi, n - (op == "<"))
            elif op in (">=", ">"):
                lo = max(lo, n + (op == ">"))
            elif op == "==":
                lo, hi = max(lo, n), min(hi, n)
            if lo > hi:
                raise ValueError(f"assume: {assumption.text!r} leaves no size of {name} in {ranges[name]}")
            ranges[name] = (lo, hi)
    return ranges, alias


def _dims(named: dict, bound: dict, ranges: dict, alias: dict, fn: Callable) -> tuple[dict, dict, dict]:
    """(example size by name, Dim by name, dynamic_shapes by argument)."""
    examples: dict[str, int] = {}
    dims: dict[str, torch.export.Dim] = {}
    dynamic: dict[str, dict[int, torch.export.Dim]] = {}
    for arg, axes in named.items():
        for axis, (name, broadcastable) in axes.items():
            name = alias.get(name, name)
            if name not in ranges:
                continue
            size = bound[arg].shape[axis]
            if broadcastable and size == 1:
                continue  # a #name axis of size 1 broadcasts: it stays 1
            lo, hi = ranges[name]
            if not lo <= size <= hi:
                raise ValueError(
                    f"prove: {fn.__qualname__}: argument {arg!r} axis {axis} ({name}) is {size}, outside the "
                    f"range {name}={lo}..{hi}; give example inputs within the ranges"
                )
            examples.setdefault(name, size)
            if lo == hi:
                continue  # one size: the axis stays static (export makes no Dim of an empty range)
            if name not in dims:
                dims[name] = torch.export.Dim(name, min=lo, max=hi)
            dynamic.setdefault(arg, {})[axis] = dims[name]
    return examples, dims, dynamic


def _symbol_names(recorder: GuardRecorder, named: dict, alias: dict) -> dict[str, str]:
    """torch's symbol (``s27``) -> the dimension name of the input axis it stands for."""
    names = {}
    for guard in recorder.guards:
        for symbol, sources in guard.sources.items():
            for source in sources:
                match = _SOURCE.match(source)
                if match:  # a tensor argument's axis, or a part's of a structured one (L['mask'].key_mask)
                    axis = named.get(match["arg"] + match["path"], {}).get(int(match["axis"]))
                    if axis is not None:
                        names[symbol] = alias.get(axis[0], axis[0])
                        break
    return names


def _calls(recorder: GuardRecorder, top: str) -> dict[str, CallReport]:
    calls: dict[str, CallReport] = {}
    for reached in recorder.reached:
        chain = " > ".join(reached.calls)
        if chain in calls:
            calls[chain].times += 1
        else:
            calls[chain] = CallReport(chain, reached.where, 1, reached.values)
    return calls


def _by(guard: Guard) -> str:
    if guard.subject is not None:
        axis = f" axis {guard.axis}" if guard.axis else ""
        return f"{guard.subject}{axis}"
    return "the model's code" if guard.where else "torch's code"


def _is_constraint_violation(error: Exception) -> bool:
    text = str(error)
    return "Constraints violated" in text or "specialized" in text or "ConstraintViolation" in type(error).__name__


def _first_lines(error: Exception, n: int = 3) -> str:
    return " ".join(str(error).strip().splitlines()[:n])


def rerun_eagerly(target, bound: dict, named: dict, alias: dict, sizes: dict, fn: Callable) -> str:
    """What ``target`` does eagerly, checks on, on inputs like the examples at ``sizes``."""
    inputs = inputs_at(bound, named, alias, sizes, _like)
    try:
        with checks(True), torch.no_grad():
            fn(**inputs) if isinstance(target, nn.Module) else target(**inputs)
    except TypeCheckError as error:
        return "TypeCheckError: " + str(error).splitlines()[0]
    except Exception as error:  # noqa: BLE001 - reported as it is
        return f"{type(error).__name__}: {_first_lines(error, 1)}"
    return "no error (the code takes another path at these sizes; the traced program does not hold there)"


def _like(value: torch.Tensor, shape: list[int]) -> torch.Tensor:
    """A tensor of ``shape`` with ``value``'s dtype and device and values of its kind."""
    if value.dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool, device=value.device)
    if value.is_floating_point():
        return torch.randn(shape, dtype=value.dtype, device=value.device)
    low = int(value.min()) if value.numel() else 0
    high = int(value.max()) + 1 if value.numel() else 1
    return torch.randint(low, max(high, low + 1), shape, dtype=value.dtype, device=value.device)
