"""The guards torch's symbolic shape reasoning adds while a model is exported, each with the code that asked for it.

While ``torch.export`` traces with symbolic sizes, every comparison on a size that the sizes' ranges do not decide
(a contract's ``size != bound`` in ``transformer.contracts.traced_rules``, a model's ``if window < seq``, an
``int(seq)``) adds a guard to the shape environment (``ShapeEnv._log_guard``, torch.fx.experimental.symbolic_shapes,
torch 2.9 to 2.14): the traced program holds only where the guard does. :class:`GuardRecorder` records each one with
the checked calls being traced (outermost first), the contract argument and axis being checked when a contract
asked (read from the checker's frames), and the model's source line otherwise; it also records every checked call
reached (:mod:`transformer.contracts.decorator` hands a call traced with checks on to ``call_traced``).
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass, field

from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..contracts import decorator as _decorator
from ..contracts import traced as _traced

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CONTRACTS = os.path.join(_PACKAGE, "contracts")
_PROOFS = os.path.join(_PACKAGE, "proofs")
_TORCH = os.path.dirname(os.path.abspath(_decorator.torch.__file__))


@dataclass
class Guard:
    """One guard: ``expr`` (a sympy boolean over the shape environment's symbols) and who asked for it."""

    kind: str  # "eval": a guard (the program holds only where it does); "runtime_assert": an assertion kept in it
    expr: object
    calls: tuple[str, ...]  # the checked calls being traced, outermost first
    subject: str | None  # "argument 'x'" / "the return value" / "a check(...)" when a contract asked, else None
    axis: str | None  # the contract's dimension (its name, its expression, or its fixed size) being compared
    where: str  # "path:line" of the model's code (or of the contract's function) that asked
    source: str  # that line's text
    sources: dict = field(default_factory=dict)  # symbol name -> the input axes it stands for (torch's sources)


@dataclass
class ReachedCall:
    """A checked call traced with checks on: its qualified name (with its callers) and its function's source line."""

    calls: tuple[str, ...]
    where: str
    values: tuple[str, ...]  # the arguments whose annotation is not a tensor's (their values are not proved over)


def _source_name(source) -> str:
    name = source.name
    return name() if callable(name) else name


def _relative(path: str) -> str:
    root = os.path.dirname(_PACKAGE)
    return os.path.relpath(path, root) if path.startswith(root + os.sep) else path


def _attribute(frame) -> tuple[str | None, str | None, str, str]:
    """(subject, axis, where, source) for the guard asked for under ``frame`` (the hook's caller)."""
    subject = axis = None
    user = None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        name = frame.f_code.co_name
        if path.startswith(_CONTRACTS):
            if name == "fits_dims" and axis is None:
                dim = frame.f_locals.get("dim")
                if dim is not None:
                    axis = str(dim[1]) if dim[0] != "symbolic" else "(an expression)"
            elif name == "call_traced" and subject is None:
                line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                returned = "result" in line
                subject = "the return value" if returned else f"argument '{frame.f_locals.get('name')}'"
            elif name == "check" and subject is None:
                subject = "a check(...) inside the call"
        elif user is None and not path.startswith(_TORCH) and not path.startswith(_PROOFS) and "<" not in path:
            user = frame
        if user is not None:  # (a contract's frames are inside it: its subject and axis are read by now)
            break
        frame = frame.f_back
    if user is None:
        return subject, axis, "", ""
    line = linecache.getline(user.f_code.co_filename, user.f_lineno).strip()
    return subject, axis, f"{_relative(user.f_code.co_filename)}:{user.f_lineno}", line


class GuardRecorder:
    """A context: while it is entered, every guard the shape environment adds and every checked call traced are
    recorded in :attr:`guards` and :attr:`reached` (one recorder at a time; not thread-safe)."""

    def __init__(self) -> None:
        self.guards: list[Guard] = []
        self.reached: list[ReachedCall] = []
        self.shape_env: ShapeEnv | None = None

    def __enter__(self) -> GuardRecorder:
        recorder = self
        self._log_guard = original_log = ShapeEnv._log_guard
        self._call_traced = original_call = _decorator.call_traced

        def log_guard(env, prefix: str, g, forcing_spec: bool):
            recorder._record(env, prefix, g)
            return original_log(env, prefix, g, forcing_spec)

        def call_traced(contract, fn, args, kwargs, eager=None):
            code = getattr(fn, "__code__", None)
            where = f"{_relative(code.co_filename)}:{code.co_firstlineno}" if code is not None else ""
            values = tuple(name for name, hint, _, _ in contract.checks if not _tensor_hint(hint) and hint[0] != "any")
            recorder.reached.append(ReachedCall((*_traced._TRACE_CALLS, contract.qualname), where, values))
            return original_call(contract, fn, args, kwargs, eager)

        ShapeEnv._log_guard = log_guard
        _decorator.call_traced = call_traced
        return self

    def __exit__(self, *exc) -> None:
        ShapeEnv._log_guard = self._log_guard
        _decorator.call_traced = self._call_traced

    def _record(self, env: ShapeEnv, prefix: str, g) -> None:
        kind = prefix.split(" ")[0]
        if kind not in ("eval", "runtime_assert") or "suppressed" in prefix:
            return
        self.shape_env = env
        subject, axis, where, source = _attribute(sys._getframe(2))
        sources = {
            str(s): [_source_name(x) for x in env.var_to_sources.get(s, [])] for s in getattr(g, "free_symbols", ())
        }
        calls = tuple(_traced._TRACE_CALLS)
        self.guards.append(Guard(kind, g, calls, subject, axis, where, source, sources))


def _tensor_hint(hint: tuple) -> bool:
    """Whether ``hint`` (a parsed annotation) is a tensor's, or a union holding one."""
    if hint[0] == "array":
        return True
    if hint[0] == "union":
        return any(_tensor_hint(h) for h in hint[1])
    return False
