"""Tests for the mutants of transformer/contracts/grammar.py that mutmut's run left alive.

Each test names the promise it checks (the docstring it comes from); tests/mutation/tool_runs/contracts.json names
the mutants it kills (scripts/mutation_tool.py, issue 31). The package's modules write ``from __future__ import
annotations``: every contract of theirs is a string until it is resolved in the function's own module, so the
first tests define their functions the same way, in a module of their own.
"""

from __future__ import annotations

import inspect
import types
import typing

import pytest
import torch
from jaxtyping import AbstractArray

from transformer import TypeCheckError, checked
from transformer.contracts.grammar import parse_hint, resolved_signature

MODULE = """
from __future__ import annotations
import typing
from transformer import Float, Tensor

def f(x: Float[Tensor, "b d"], y, z: typing.Annotated[int, "meta"] = 1) -> Float[Tensor, " b"]:
    return x.sum(-1)
"""


def _module():
    module = types.ModuleType("contracts_string_annotations")
    exec(compile(MODULE, "<contracts_string_annotations>", "exec"), module.__dict__)
    return module


def test_string_annotations_are_resolved_in_the_functions_own_module():
    """resolved_signature: ``fn``'s signature with its annotations resolved as jaxtyping resolves them (in
    ``fn.__globals__``, extras such as Annotated kept); a parameter without one stays without."""
    signature = resolved_signature(_module().f)
    x, y, z = signature.parameters.values()
    assert isinstance(x.annotation, type) and issubclass(x.annotation, AbstractArray)
    assert x.annotation.dim_str == "b d"
    assert y.annotation is inspect.Parameter.empty
    assert z.annotation == typing.Annotated[int, "meta"] and typing.get_args(z.annotation)[1] == "meta"
    ret = signature.return_annotation
    assert isinstance(ret, type) and issubclass(ret, AbstractArray) and ret.dim_str.strip() == "b"


def test_a_checked_function_with_string_annotations_refuses_wrong_shapes():
    f = checked(_module().f)
    assert f(torch.ones(2, 3), None).tolist() == [3.0, 3.0]
    with pytest.raises(TypeCheckError, match="argument 'x'"):
        f(torch.ones(2), None)


def test_the_traced_checkers_hints_say_what_each_annotation_asks_for():
    """parse_hint: an annotation as a tuple the traced checker walks (None: anything goes); classes go to
    ``classes`` and the hint keeps their index."""
    from transformer import Float, Tensor

    classes: list = []
    assert parse_hint(typing.Any, classes) is None
    assert parse_hint(inspect.Parameter.empty, classes) is None
    assert parse_hint(None, classes) == ("none",)
    assert parse_hint(type(None), classes) == ("none",)
    assert parse_hint(int, classes) == ("class", 0) and classes == [int]
    array = parse_hint(Float[Tensor, "b d"], classes)
    assert array[0] == "array" and classes == [int]
    assert parse_hint(typing.Literal["a", 2], classes) == ("literal", ("a", 2), (1, 2)) and classes == [int, str, int]
    assert parse_hint(int | None, []) == ("union", (("class", 0), ("none",)))
    assert parse_hint(typing.Optional[typing.Any], []) is None  # noqa: UP045 (the typing form on purpose)
    assert parse_hint(tuple[int, typing.Any], []) == ("tuple", (("class", 0), ("any",)))
    assert parse_hint(typing.Callable[[int], int], []) is None
