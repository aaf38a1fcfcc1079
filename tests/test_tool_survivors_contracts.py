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
    assert parse_hint(typing.Callable[[int], int], []) == ("callable",)  # beartype checks callability only


SHAPES = [(), (1,), (3,), (1, 3), (2, 3), (2, 1), (4, 2, 3), (3, 3), (4, 1, 1)]


def test_sizes_compare_and_broadcast_as_numpy_does():
    """same_sizes: ``a == b`` one size at a time; broadcast: ``np.broadcast_shapes(a, b)``, or None."""
    import numpy as np

    from transformer.contracts.grammar import broadcast, same_sizes

    for a in SHAPES:
        for b in SHAPES:
            assert same_sizes(a, b) == (a == b), (a, b)
            try:
                expected = tuple(np.broadcast_shapes(a, b))
            except ValueError:
                expected = None
            assert broadcast(a, b) == expected, (a, b)


@pytest.mark.parametrize(
    ("previous_broadcastable", "previous", "broadcastable", "new", "joined"),
    [
        (False, (2, 3), False, (2, 3), (False, (2, 3))),
        (False, (2, 3), False, (2, 1), None),
        (False, (2, 3), False, (3,), None),
        (False, (2, 3), True, (1, 3), (False, (2, 3))),
        (False, (2, 3), True, (4, 3), None),
        (False, (2, 3), True, (2, 1, 3), None),
        (True, (1, 3), False, (2, 3), (False, (2, 3))),
        (True, (2, 3), False, (1, 3), None),
        (True, (2, 3), False, (4, 3), None),
        (True, (1, 3), True, (2, 1), (True, (2, 3))),
        (True, (2, 3), True, (4, 3), None),
    ],
)
def test_a_variadic_dimension_seen_again_joins_by_jaxtypings_rule(
    previous_broadcastable, previous, broadcastable, new, joined
):
    """join_variadic: a ``*name`` seen again with sizes ``new``: the new (broadcastable, shape) memo entry, or None.
    A fixed ``*name`` must equal; a broadcastable one (``*#name``) may have size 1 where the other has any."""
    from transformer.contracts.grammar import join_variadic

    assert join_variadic(previous_broadcastable, previous, broadcastable, new) == joined


def test_the_fields_an_annotation_reads_are_listed_once_first_seen_first():
    """hint_fields: the ``{name.attr}`` fields a parsed annotation reads, as ``(name, attributes)`` pairs."""
    from transformer import Float, Tensor
    from transformer.contracts.grammar import hint_fields

    hint = parse_hint(Float[Tensor, "{self.d_model} {x.n}+1 {self.d_model}*2"], [])
    assert hint_fields(hint) == (("self", ("d_model",)), ("x", ("n",)))
    nested = parse_hint(tuple[Float[Tensor, "{a.b.c}"], Float[Tensor, "b {z}"] | None], [])  # noqa: F821 (jaxtyping dimensions, not a name)
    assert hint_fields(nested) == (("a", ("b", "c")), ("z", ()))
    assert hint_fields(None) == () and hint_fields(parse_hint(int, [])) == ()


@pytest.mark.parametrize(
    ("dim_str", "parsed"),
    [
        ("", ((), -1)),
        ("b d", ((("named", "b", False), ("named", "d", False)), -1)),
        ("#b *batch d", ((("named", "b", True), ("var", "batch", False), ("named", "d", False)), 1)),
        ("d *#batch", ((("named", "d", False), ("var", "batch", True)), 1)),
        ("b ... d", ((("named", "b", False), ("var_anon", None, False), ("named", "d", False)), 1)),
        ("_ 3 #4 _b", ((("anon", None, False), ("fixed", 3, False), ("fixed", 4, True), ("anon", None, False)), -1)),
        ("*_ d", ((("var_anon", None, False), ("named", "d", False)), 0)),
        ("rows=b", ((("named", "b", False),), -1)),
        ("#rows=4", ((("fixed", 4, True),), -1)),
    ],
)
def test_the_dimension_grammar_reads_every_form_of_the_docstring(dim_str, parsed):
    """parse_dims: ``name``, ``#name`` (size 1 broadcasts), ``*name`` / ``*#name`` / ``...`` (any number of axes),
    ``_``, fixed sizes, symbolic expressions; each axis ``(kind, name or size or tree, broadcastable)`` and the index
    of the variadic one (-1 without)."""
    from transformer.contracts.grammar import parse_dims

    assert parse_dims(dim_str) == parsed


def test_a_symbolic_axis_is_parsed_as_an_expression():
    from transformer.contracts.grammar import parse_dims, parse_expression

    # (the axis's own text last: jaxtyping's message writes it)
    assert parse_dims("#b+1 d") == ((("symbolic", parse_expression("b+1"), True, "b+1"), ("named", "d", False)), -1)


@pytest.mark.parametrize(
    ("dim_str", "axis"),
    [("a...", "a..."), ("**b", "*b"), ("##b", "#b"), ("__b", "_b"), ("?b", "?b"), ("*3", "3"), ("_3", "3"),
     ("*b+1", "b+1")],
)  # fmt: skip
def test_an_axis_outside_the_grammar_is_named(dim_str, axis):
    """Anything else raises UnsupportedAnnotation naming the axis (jaxtyping then checks the annotation itself)."""
    from transformer.contracts.grammar import UnsupportedAnnotation, parse_dims

    with pytest.raises(UnsupportedAnnotation) as error:
        parse_dims(f"b {dim_str}")
    assert str(error.value) == f"the axis {axis!r}"


def test_annotations_the_traced_checker_does_not_replicate_are_named():
    """parse_hint: an array type other than torch.Tensor raises UnsupportedAnnotation; the containers
    (``tuple[X, ...]``, ``list[X]``, fixed tuples) are read as the traced checker checks them (issue 31)."""
    import numpy as np
    from jaxtyping import Float

    from transformer.contracts.grammar import UnsupportedAnnotation

    with pytest.raises(UnsupportedAnnotation, match=r"^the array type <class 'numpy.ndarray'>$"):
        parse_hint(Float[np.ndarray, "b"], [])
    assert parse_hint(tuple[int, int, int], []) == ("tuple", (("class", 0), ("class", 1), ("class", 2)))
    assert parse_hint(tuple[int, ...], []) == ("tuple_of", ("class", 0))
    assert parse_hint(list[int], []) == ("list", ("class", 0))


def test_a_symbolic_size_is_a_small_tree_of_dimensions_fields_constants_and_operators():
    """parse_expression: ``steps+1`` or ``{self.d_model}`` as a small tree (jaxtyping fills ``{...}`` from the call's
    arguments, then evaluates the rest over the sizes bound so far); anything else is named."""
    from transformer.contracts.grammar import UnsupportedAnnotation, hint_fields, parse_expression

    tree = parse_expression("-n+{self.k}*2")
    assert tree == ("bin", "+", ("neg", ("dim", "n")), ("bin", "*", ("arg", "self", ("k",)), ("const", 2)))
    assert parse_expression("+{a.b}") == ("pos", ("arg", "a", ("b",)))
    assert hint_fields(("array", None, (("symbolic", tree, False),), -1)) == (("self", ("k",)),)
    assert hint_fields(("array", None, (("symbolic", ("neg", ("arg", "a", ())), False),), -1)) == (("a", ()),)
    for text, named in [("{self.x-1}", "{self.x-1}"), ("n+", "n+"), ("n<3", "n<3"), ("f(n)", "f(n)")]:
        with pytest.raises(UnsupportedAnnotation) as error:
            parse_expression(text)
        assert str(error.value) == f"the expression {named!r}"


@pytest.mark.parametrize("name", ["X", "Xs", "Q", "z"])
def test_an_axis_name_may_begin_with_any_letter(name):
    """parse_dims: ``name`` is any identifier; only ``#``, ``*``, ``_`` and ``?`` are prefixes (the prefix set is
    exactly those characters, so no letter is refused as one)."""
    from transformer.contracts.grammar import parse_dims

    assert parse_dims(f"b {name}") == ((("named", "b", False), ("named", name, False)), -1)
    assert parse_dims(f"#{name}") == ((("named", name, True),), -1)


def test_an_annotation_that_is_neither_a_class_nor_a_known_form_is_left_to_the_eager_checker():
    """parse_hint: UnsupportedAnnotation for what it does not read, e.g. a TypeVar or a NewType (not classes, so
    ``classes`` stays empty and no isinstance check is made): the traced checker then checks the call eagerly,
    never dropping the annotation (docs/contracts.md)."""
    from transformer.contracts.grammar import UnsupportedAnnotation

    classes: list = []
    for annotation in (typing.TypeVar("T"), typing.NewType("UserId", int)):
        with pytest.raises(UnsupportedAnnotation):
            parse_hint(annotation, classes)
    assert classes == []


def test_a_field_under_a_unary_plus_is_read():
    """hint_fields: ``+{a.b}`` reads the field ``a.b`` as ``-{a.b}`` does (jaxtyping fills both from the call)."""
    from transformer import Float, Tensor
    from transformer.contracts.grammar import hint_fields

    assert hint_fields(parse_hint(Float[Tensor, "+{a.b}"], [])) == (("a", ("b",)),)
    assert hint_fields(parse_hint(Float[Tensor, "n +{self.k}"], [])) == (("self", ("k",)),)


def test_container_hints_say_what_their_items_ask_for():
    """parse_hint: ``tuple[X, ...]``, ``list[X]`` and ``dict[K, V]`` are read item by item (an item that asks
    nothing is ``("any",)``); an annotation with one argument that is not a list (``set[int]``, ``type[int]``) is
    not read as one (UnsupportedAnnotation: checked eagerly)."""
    from transformer.contracts.grammar import UnsupportedAnnotation

    classes: list = []
    assert parse_hint(dict[str, int], classes) == ("dict", ("class", 0), ("class", 1)) and classes == [str, int]
    assert parse_hint(dict[typing.Any, typing.Any], []) == ("dict", ("any",), ("any",))
    assert parse_hint(tuple[typing.Any, ...], []) == ("tuple_of", ("any",))
    assert parse_hint(list[typing.Any], []) == ("list", ("any",))
    for annotation in (set[int], type[int]):
        with pytest.raises(UnsupportedAnnotation):
            parse_hint(annotation, [])


@pytest.mark.parametrize("container", ["tuple[{}, ...]", "list[{}]", "dict[str, {}]"])
def test_the_fields_an_item_of_a_container_reads_are_listed(container):
    """hint_fields: the ``{name.attr}`` fields of every item of a container annotation (the traced checker fills
    them from the call, as for a bare array)."""
    from transformer import Float, Tensor
    from transformer.contracts.grammar import hint_fields

    names = {"Float": Float, "Tensor": Tensor, "str": str}
    annotation = eval(container.format('Float[Tensor, "{self.d_model} {x.n}"]'), names)  # noqa: S307 (a literal of ours)
    assert hint_fields(parse_hint(annotation, [])) == (("self", ("d_model",)), ("x", ("n",)))


def test_the_dtypes_an_array_annotation_accepts_are_jaxtypings_own():
    """array_dtypes: the torch dtypes a jaxtyping array annotation accepts, as jaxtyping matches them (a dtype
    name equal to a string, or matched by a regex, as a custom ``AbstractDtype`` may give), None for any
    (``Shaped``). jaxtyping itself is the reference: each torch dtype is in the tuple exactly when jaxtyping's
    isinstance accepts a tensor of it. The function is checked inside the test, so its contract is built from the
    grammar as it is now."""
    import re

    from jaxtyping import AbstractDtype, Float, Int, Shaped

    from transformer.contracts.grammar import array_dtypes

    class Wide(AbstractDtype):
        dtypes = [re.compile(r"float(32|64)$"), "int64"]

    for kind in (Float, Int, Wide):
        annotation = kind[torch.Tensor, "n"]
        accepted = {dt for dt in (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64, torch.bool)}
        accepted = {dt for dt in accepted if isinstance(torch.zeros(2, dtype=dt), annotation)}
        assert accepted and accepted == set(array_dtypes(annotation)) & {
            torch.float16,
            torch.float32,
            torch.float64,
            torch.int32,
            torch.int64,
            torch.bool,
        }, kind
    assert set(array_dtypes(Wide[torch.Tensor, "n"])) == {torch.float32, torch.float64, torch.int64}
    assert array_dtypes(Shaped[torch.Tensor, "n"]) is None

    def wide(x):
        return x

    wide.__annotations__ = {"x": Wide[torch.Tensor, "n"], "return": Wide[torch.Tensor, "n"]}  # a local class
    wide = checked(wide)
    assert wide(torch.zeros(3, dtype=torch.float64)).dtype == torch.float64
    with pytest.raises(TypeCheckError, match="argument 'x'"):
        wide(torch.zeros(3, dtype=torch.float16))
