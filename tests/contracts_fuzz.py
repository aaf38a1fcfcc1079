"""A seeded differential fuzzer of ``transformer.contracts.checked`` against jaxtyping + beartype (the oracle).

docs/contracts.md promises that ``checked`` decides every call "the same as jaxtyping + beartype", eagerly and under
``torch.compile(fullgraph=True)``. This module generates random signatures over the whole annotation grammar (every
axis form: ``name``, fixed sizes, ``_``, ``*name``, ``...``, ``#name``, ``*#name``, symbolic expressions,
``{self.x}`` and ``{arg}`` fields; dtype kinds; ``| None``, unions, tuples, ``list``/``tuple``/``dict`` containers,
classes, ``Literal``, ``*args``/``**kwargs``; return values) and calls that fit, nearly fit (one axis off by one,
size 1 where ``#`` allows it, one axis short or long, zero-size axes, expanded and non-contiguous tensors, another
dtype) and do not fit, and runs each call through

* the oracle: ``jaxtyping.jaxtyped(fn, typechecker=beartype.beartype)``;
* ``checked(fn)`` eagerly;
* ``torch.compile(checked(fn), fullgraph=True)``, static and ``dynamic=True`` (backend ``"eager"``).

The rule: never accept what jaxtyping rejects, never reject what it accepts, the same exception type (a
``CompiledContractError`` counts as the ``TypeCheckError`` it is), and the same first line (compiled against the
eager one, which writes the summary line; the eager error must also carry jaxtyping's own report). Each
disagreement is counted by class (``false_accept``, ``false_reject``, ``error_type``, ``first_line``, ``report``)
and tagged with the grammar features of its signature.

The generator is ``tests/contracts_fuzz_grammar.py``. Used by ``tests/test_contracts_differential.py`` (a short
fixed-seed budget) and ``scripts/contracts_fuzz.py`` (the
long budget, by hand; JSON under ``benchmarks/results/differential/``).
"""

from __future__ import annotations

import collections
import random
import re
from dataclasses import dataclass, field

import numpy as np
import torch
from beartype import beartype
from contracts_fuzz_grammar import Call, Signature, random_call, random_signature
from jaxtyping import jaxtyped

from transformer.contracts import CompiledContractError, checked
from transformer.contracts.traced import CompiledAnnotationError

__all__ = ["Call", "Signature", "compare", "outcome", "random_call", "random_signature", "run_compiled", "run_eager"]


# ---------------------------------------------------------------------------------------------------- outcomes
def _family(error: BaseException) -> str:
    if isinstance(error, CompiledContractError):
        return "TypeCheckError"
    if isinstance(error, CompiledAnnotationError):
        return "AnnotationError"
    return type(error).__name__


def outcome(call_fn, call: Call) -> tuple:
    """("ok",) or ("raise", exception class name, first line, full message)."""
    try:
        call_fn(*call.args, **call.kwargs)
    except Exception as error:  # noqa: BLE001 (every exception is an outcome to compare)
        text = str(error)
        return ("raise", _family(error), text.splitlines()[0] if text else "", text)
    return ("ok",)


def compare(oracle: tuple, ours: tuple, reference_line: tuple | None = None) -> str | None:
    """The class of a disagreement of ``ours`` with ``oracle`` (None: they agree). ``reference_line``: the outcome
    whose first line ours must repeat (compiled against eager), else ours must carry the oracle's report."""
    if oracle[0] == "ok":
        if ours[0] == "ok":
            return None
        if ours[1] == "Unsupported" and "typed-transformer: this contract holds" in ours[3]:
            return "eager_only_under_fullgraph"  # documented: a call checked eagerly is a graph break
        return "false_reject"
    if ours[0] == "ok":
        return "false_accept"
    if ours[1] == "Unsupported" and "typed-transformer: this contract holds" in ours[3]:
        return "eager_only_under_fullgraph"  # documented: a call checked eagerly is a graph break
    if oracle[1] != ours[1]:
        return "error_type"
    if reference_line is not None:
        if reference_line[0] == "raise" and reference_line[2] != ours[2]:
            if _sizes_as_tuples(reference_line[2]) == _sizes_as_tuples(ours[2]):
                return "variadic_shape_text"  # documented: torch.Size([2, 1]) where eager writes (2, 1), or back
            return "first_line"
        return None
    if oracle[1] == "TypeCheckError" and oracle[3] not in ours[3]:
        return "report"
    return None


def _sizes_as_tuples(line: str) -> str:
    """``torch.Size([2, 1])`` written ``(2, 1)`` and ``torch.Size([2])`` written ``(2,)``."""

    def tuple_text(match: re.Match) -> str:
        inner = match.group(1)
        return "(" + inner + ("," if inner and "," not in inner else "") + ")"

    return re.sub(r"torch\.Size\(\[([^\]]*)\]\)", tuple_text, line)


@dataclass
class Tally:
    calls: int = 0
    signatures: int = 0
    disagreements: collections.Counter = field(default_factory=collections.Counter)
    by_feature: collections.Counter = field(default_factory=collections.Counter)
    examples: list = field(default_factory=list)

    def add(self, kind: str | None, signature: Signature, call: Call, oracle: tuple, ours: tuple, keep: int) -> None:
        self.calls += 1
        if kind is None:
            return
        self.disagreements[kind] += 1
        for feature in signature.features | call.features:
            self.by_feature[feature] += 1
        if sum(example["class"] == kind for example in self.examples) < keep:  # (``keep`` of each class)
            self.examples.append(
                {
                    "class": kind,
                    "signature": signature.source.splitlines()[0],
                    "fields": repr(signature.fields),
                    "call": _short(call),
                    "jaxtyping": list(oracle[:3]),
                    "ours": list(ours[:3]),
                }
            )

    def as_json(self) -> dict:
        return {
            "signatures": self.signatures,
            "calls": self.calls,
            "disagreements": sum(self.disagreements.values()),
            "by_class": dict(sorted(self.disagreements.items())),
            "by_feature": dict(sorted(self.by_feature.items())),
            "examples": self.examples,
        }


def _short(call: Call) -> str:
    def text(value) -> str:
        if isinstance(value, torch.Tensor):
            kind = "" if value.is_contiguous() else " non-contiguous"
            return f"{str(value.dtype)[6:]}{list(value.shape)}{kind}"
        if isinstance(value, np.ndarray):
            return f"np{list(value.shape)}"
        if isinstance(value, (list, tuple)):
            inner = ", ".join(text(v) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner})"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {text(v)}" for k, v in value.items()) + "}"
        return repr(value)

    return text(call.args[1:]) + (" " + text(call.kwargs) if call.kwargs else "")


def run_eager(seed: int, calls: int, keep: int = 20, calls_per_signature: int = 8) -> Tally:
    """``calls`` random calls of random signatures: ``checked`` eagerly against jaxtyping + beartype."""
    rng = random.Random(seed)
    tally = Tally()
    while tally.calls < calls:
        signature = random_signature(rng)
        fn = signature.build()
        ours, oracle = checked(fn), jaxtyped(fn, typechecker=beartype)
        tally.signatures += 1
        for _ in range(calls_per_signature):
            call = random_call(rng, signature)
            expected, got = outcome(oracle, call), outcome(ours, call)
            tally.add(compare(expected, got), signature, call, expected, got, keep)
    return tally


def run_compiled(seed: int, signatures: int, calls_per_signature: int = 3, keep: int = 20) -> dict[str, Tally]:
    """``signatures`` random signatures, each compiled with ``fullgraph=True`` static and with ``dynamic=True``
    (backend "eager"), ``calls_per_signature`` calls each: the decision against jaxtyping + beartype, the first line
    against eager ``checked``."""
    import torch._dynamo

    rng = random.Random(seed)
    tallies = {"static": Tally(), "dynamic": Tally()}
    for _ in range(signatures):
        signature = random_signature(rng)
        fn = signature.build()
        ours, oracle = checked(fn), jaxtyped(fn, typechecker=beartype)
        calls = [random_call(rng, signature) for _ in range(calls_per_signature)]
        for mode, dynamic in (("static", False), ("dynamic", True)):
            torch._dynamo.reset()
            compiled = torch.compile(ours, fullgraph=True, dynamic=dynamic, backend="eager")
            tallies[mode].signatures += 1
            for call in calls:
                expected, eager, got = outcome(oracle, call), outcome(ours, call), outcome(compiled, call)
                tallies[mode].add(compare(expected, got, eager), signature, call, expected, got, keep)
    torch._dynamo.reset()
    return tallies
