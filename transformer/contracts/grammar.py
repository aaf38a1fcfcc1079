"""The annotation grammar both checkers read: jaxtyping's array annotations and the types around them.

An annotation is resolved once, as jaxtyping resolves it when it decorates (:func:`resolved_signature`). The
dimensions of an array annotation are parsed by :func:`parse_dims` (``name``, ``#name``, ``*name``, ``*#name``,
``...``, ``_``, fixed sizes, symbolic expressions such as ``steps+1`` or ``min(a,b)``, ``{self.x}`` fields), its
dtypes matched by :func:`array_dtypes`. The eager checker (``transformer.contracts.fast``) compiles these into Python
source; the traced checker (``transformer.contracts.traced``) walks :func:`parse_hint`'s tuples while Dynamo traces.
Both join the sizes of a ``*name`` seen twice by :func:`join_variadic`. Anything else raises
:class:`UnsupportedAnnotation` (the traced checker then checks the call eagerly, outside the graph).
"""

from __future__ import annotations

import ast
import collections.abc
import inspect
import re
import types
import typing
from collections.abc import Callable

import torch
from jaxtyping import AbstractArray

from ..common.dtypes import DTYPE_NAMES, TORCH_DTYPES

_EMPTY = inspect.Parameter.empty
_CALLS = ("min", "max", "abs")
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


class UnsupportedAnnotation(ValueError):
    """An annotation (or a part of one) the checkers do not replicate: jaxtyping checks it."""


def destring(annotation: object, namespace: dict) -> object:
    """jaxtyping's ``_destring_annotation``: the annotation resolved in ``namespace`` (``Any`` where it cannot be)."""

    def probe(value):
        del value

    probe.__annotations__ = {"value": annotation}
    try:
        return typing.get_type_hints(probe, namespace, include_extras=True)["value"]
    except Exception:  # as jaxtyping: not only NameError (e.g. ValueError for two variadic axes)
        return typing.Any


def resolved_signature(fn: Callable) -> inspect.Signature:
    """``fn``'s signature with its annotations resolved as jaxtyping resolves them when it decorates ``fn``."""
    signature = inspect.signature(fn)

    def resolve(annotation: object) -> object:
        return annotation if annotation is _EMPTY else destring(annotation, fn.__globals__)

    params = [p.replace(annotation=resolve(p.annotation)) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=resolve(signature.return_annotation))


def parse_expression(text: str) -> tuple:
    """A symbolic size such as ``steps+1`` or ``{self.d_model}`` as a small tree: jaxtyping fills ``{...}`` from the
    call's arguments, then evaluates the rest over the dimension sizes bound so far."""
    fields: dict[str, tuple] = {}

    def field(match: re.Match) -> str:
        path = match.group(1).strip().split(".")
        if not all(part.isidentifier() for part in path):
            raise UnsupportedAnnotation(f"the expression {match.group(0)!r}")
        name = f"__field{len(fields)}__"
        fields[name] = ("arg", path[0], tuple(path[1:]))
        return name

    source = re.sub(r"\{([^{}]*)\}", field, text)
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as error:
        raise UnsupportedAnnotation(f"the expression {text!r}") from error

    def convert(node: ast.AST) -> tuple:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # "2.0": jaxtyping compares 2 == 2.0
            return ("const", node.value)
        if (  # min(a, b), max(n, 1), abs(d - 1): builtins, which jaxtyping's eval sees
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _CALLS
            and node.args
            and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and (node.func.id != "abs" or len(node.args) == 1)
        ):
            return ("call", node.func.id, *(convert(a) for a in node.args))
        if isinstance(node, ast.Name):
            return fields.get(node.id, ("dim", node.id))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return ("bin", _BINARY[type(node.op)], convert(node.left), convert(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return ("neg" if isinstance(node.op, ast.USub) else "pos", convert(node.operand))
        raise UnsupportedAnnotation(f"the expression {text!r}")

    return convert(tree)


def parse_dims(dim_str: str) -> tuple[tuple, int]:
    """jaxtyping's grammar for the dimensions of an array annotation: ``name``, ``#name`` (size 1 broadcasts),
    ``*name`` / ``*#name`` / ``...`` (any number of axes), ``_``, fixed sizes, symbolic expressions, ``{attr}``.
    Returns the axes, each ``(kind, name or size or tree, broadcastable)``, and the index of the variadic one (-1)."""
    dims: list[tuple] = []
    variadic_index = -1
    for index, elem in enumerate(dim_str.split()):
        if "..." in elem:
            if elem != "...":
                raise UnsupportedAnnotation(f"the axis {elem!r}")
            dims.append(("var_anon", None, False))
            variadic_index = index
            continue
        broadcastable = variadic = anonymous = False
        while elem:
            first = elem[0]
            if first == "#" and not broadcastable:
                broadcastable, elem = True, elem[1:]
            elif first == "*" and not variadic:
                variadic, elem = True, elem[1:]
            elif first == "_" and not anonymous:
                anonymous, elem = True, elem[1:]
            elif first in "#*_?":
                raise UnsupportedAnnotation(f"the axis {elem!r}")
            elif elem.count("=") == 1:
                elem = elem.split("=")[1]
            else:
                break
        if variadic:
            variadic_index = index
        if not elem or elem.isidentifier():
            if anonymous:
                dims.append(("var_anon", None, False) if variadic else ("anon", None, False))
            else:
                dims.append(("var", elem, broadcastable) if variadic else ("named", elem, broadcastable))
        elif re.fullmatch(r"\s*[+-]?\d+\s*", elem):  # what int() reads
            if variadic or anonymous:
                raise UnsupportedAnnotation(f"the axis {elem!r}")
            dims.append(("fixed", int(elem), broadcastable))
        else:
            if variadic or anonymous:
                raise UnsupportedAnnotation(f"the axis {elem!r}")
            dims.append(("symbolic", parse_expression(elem), broadcastable, elem))  # (elem: for jaxtyping's message)
    return tuple(dims), variadic_index


def array_dtypes(annotation: type) -> tuple | None:
    """The torch dtypes a jaxtyping array annotation accepts (as jaxtyping matches them), None for any (Shaped)."""
    names = annotation.dtypes
    if not isinstance(names, (list, tuple)):  # Shaped: any dtype
        return None
    return tuple(
        dt
        for dt in TORCH_DTYPES
        if any((n == DTYPE_NAMES[dt]) if type(n) is str else bool(n.match(DTYPE_NAMES[dt])) for n in names)
    )


def parse_hint(annotation: object, classes: list) -> tuple | None:
    """An annotation as a tuple the traced checker walks (None: anything goes). Classes go to ``classes``, the
    hint keeps their index: the tables hold only constants Dynamo can take without guards. Containers:
    ``tuple[X, Y]`` (exactly that length), ``tuple[X, ...]``, ``list[X]``, ``dict[K, V]`` (the container's class,
    then every item: beartype samples one item per call, so every item that could be sampled must fit)."""
    if annotation is typing.Any or annotation is _EMPTY:
        return None
    if annotation is None or annotation is type(None):
        return ("none",)
    if isinstance(annotation, type) and issubclass(annotation, AbstractArray):
        if annotation.array_type is not torch.Tensor:  # (np.ndarray, ...): checked eagerly, see traced.py
            raise UnsupportedAnnotation(f"the array type {annotation.array_type!r}")
        dims, variadic_index = parse_dims(annotation.dim_str)
        return ("array", array_dtypes(annotation), dims, variadic_index)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:  # the values, and the index of each value's class in ``classes``
        values = typing.get_args(annotation)
        classes.extend(type(value) for value in values)
        return ("literal", values, tuple(range(len(classes) - len(values), len(classes))))
    if origin is typing.Union or origin is types.UnionType:
        alternatives = tuple(parse_hint(a, classes) for a in typing.get_args(annotation))
        return None if any(a is None for a in alternatives) else ("union", alternatives)
    if origin is tuple:
        items = typing.get_args(annotation)
        if len(items) == 2 and items[1] is Ellipsis:  # tuple[X, ...]: a tuple of any length, every item an X
            return ("tuple_of", parse_hint(items[0], classes) or ("any",))
        return ("tuple", tuple(parse_hint(a, classes) or ("any",) for a in items))
    if origin is list and len(typing.get_args(annotation)) == 1:
        return ("list", parse_hint(typing.get_args(annotation)[0], classes) or ("any",))
    if origin is dict and len(typing.get_args(annotation)) == 2:
        key, value = typing.get_args(annotation)
        return ("dict", parse_hint(key, classes) or ("any",), parse_hint(value, classes) or ("any",))
    if origin in (collections.abc.Sequence, collections.abc.Iterable) and len(typing.get_args(annotation)) == 1:
        classes.append(origin)  # Sequence[int]: the class, then every item (beartype checks one, sampled)
        return ("items_of", len(classes) - 1, parse_hint(typing.get_args(annotation)[0], classes) or ("any",))
    if origin is collections.abc.Callable or annotation is collections.abc.Callable or annotation is typing.Callable:
        return ("callable",)  # beartype checks callability only
    if isinstance(annotation, type) and origin is None and not isinstance(annotation, typing._GenericAlias):
        classes.append(annotation)
        return ("class", len(classes) - 1)
    # generics (Sequence[int]), protocols: what the traced checker does not read is checked eagerly (traced.py)
    raise UnsupportedAnnotation(f"the annotation {annotation!r}")


def hint_fields(hint: tuple | None) -> tuple:
    """The ``{name.attr}`` fields a parsed annotation reads, as ``(name, attributes)`` pairs, first seen first."""
    found: list = []

    def tree(node: tuple) -> None:
        if node[0] == "arg":
            if (node[1], node[2]) not in found:
                found.append((node[1], node[2]))
        elif node[0] in ("neg", "pos"):
            tree(node[1])
        elif node[0] == "bin":
            tree(node[2])
            tree(node[3])
        elif node[0] == "call":
            for argument in node[2:]:
                tree(argument)

    def walk(h: tuple | None) -> None:
        if h is None:
            return
        if h[0] == "array":
            for dim in h[2]:
                if dim[0] == "symbolic":
                    tree(dim[1])
        elif h[0] in ("union", "tuple"):
            for item in h[1]:
                walk(item)
        elif h[0] in ("tuple_of", "list", "dict"):
            for item in h[1:]:
                walk(item)
        elif h[0] == "items_of":
            walk(h[2])

    walk(hint)
    return tuple(found)


# ------------------------------------------------------------------------------------------------------ sizes
def same_sizes(a: tuple, b: tuple) -> bool:
    """``a == b`` for two shapes, one size at a time (what Dynamo traces as one comparison per size)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=False):  # (lengths compared above)
        if x != y:
            return False
    return True


def broadcast(a: tuple, b: tuple) -> tuple | None:
    """``np.broadcast_shapes(a, b)``, or None where they do not broadcast."""
    out = []
    for k in range(max(len(a), len(b)), 0, -1):
        x = a[len(a) - k] if k <= len(a) else 1
        y = b[len(b) - k] if k <= len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        else:
            return None
    return tuple(out)


def join_variadic(previous_broadcastable: bool, previous: tuple, broadcastable: bool, new: tuple):
    """jaxtyping's rule for a ``*name`` seen again with the sizes ``new``: the new (broadcastable, shape) memo entry,
    or None (a violation)."""
    if previous_broadcastable:
        joint = broadcast(new, previous)
        if joint is None or (not broadcastable and not same_sizes(joint, new)):
            return None
        return broadcastable, joint
    if broadcastable:
        joint = broadcast(new, previous)
        return None if joint is None or not same_sizes(joint, previous) else (False, previous)
    return None if not same_sizes(new, previous) else (False, previous)
