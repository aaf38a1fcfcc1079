"""jaxtyping's rules for matching a call against its parsed annotations, in plain Python that Dynamo traces.

The traced checker (``transformer.contracts.traced``) runs these on the sizes Dynamo traces with: with static shapes
every comparison is a constant, with dynamic shapes each one is decided by the symbolic sizes or becomes a guard of
the graph. They bind dimension names as jaxtyping does (in argument order; a size-1 ``#`` axis binds nothing; a
failed check keeps what it bound before failing; ``*#name`` broadcasts like ``np.broadcast_shapes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .grammar import join_variadic

if TYPE_CHECKING:
    from .traced import Contract

#: the Python number each symbolic size stands for (see ``fits``, "class")
_SYMBOLIC = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}


_NO_FIELD = object()  # a field whose attribute is missing


def raise_annotation_error(message: str) -> None:
    """jaxtyping's ``AnnotationError(message)``, raised while the call is traced (as ``traced.raise_traced``)."""
    from .traced import ANNOTATION_ERROR, raise_traced

    raise_traced(ANNOTATION_ERROR + message.replace("{", "{{").replace("}", "}}"), [])


def bind_arguments(params: tuple, args: tuple, kwargs: dict, contract: Contract) -> tuple[dict, dict]:
    """The call's arguments by name: all of them, defaults included (jaxtyping's ``bound.arguments``, which
    ``{name}`` in an annotation reads), and those given (the ones beartype checks)."""
    bound, given = {}, {}
    for index, (name, position, var_positional, var_keyword, has_default) in enumerate(params):
        if var_positional:
            bound[name] = given[name] = args[position:]
        elif var_keyword:
            bound[name] = given[name] = {k: v for k, v in kwargs.items() if k not in bound}
        elif 0 <= position < len(args):
            bound[name] = given[name] = args[position]
        elif name in kwargs:
            bound[name] = given[name] = kwargs[name]
        elif has_default:
            bound[name] = contract.defaults[index]
    return bound, given


def evaluate(tree: tuple, single: dict, bound: dict):
    """A symbolic size (a tree of ``grammar.parse_expression``) over the sizes bound so far (``single``) and the
    call's arguments (``bound``); None while a name in it is not bound."""
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "dim":
        return single.get(tree[1])  # None: not bound (yet)
    if kind == "arg":  # (call_traced has made sure it is an int, or a string of one: field_value)
        value = field_value(bound, tree[1], tree[2])
        return int(value) if type(value) is str else value
    if kind == "neg" or kind == "pos":
        a = evaluate(tree[1], single, bound)
        return None if a is None else (-a if kind == "neg" else a)
    if kind == "call":
        values = [evaluate(argument, single, bound) for argument in tree[2:]]
        if any(v is None for v in values):
            return None
        return abs(values[0]) if tree[1] == "abs" else (min(values) if tree[1] == "min" else max(values))
    a, b = evaluate(tree[2], single, bound), evaluate(tree[3], single, bound)
    if a is None or b is None:
        return None
    op = tree[1]
    if op == "**" and tree[2][0] == "arg" and a < 0:
        # jaxtyping writes the field's value into the text and evaluates that: {self.n}**2 with n = -3 is -3**2 = -9
        return -((-a) ** b)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    return a**b


def field_value(bound: dict, name: str, attributes: tuple):
    """The value of the field ``{name.attr...}``, or ``_NO_FIELD`` where an attribute is missing."""
    value = bound[name] if name in bound else _NO_FIELD
    for attribute in attributes:
        if not hasattr(value, attribute):
            return _NO_FIELD
        value = getattr(value, attribute)
    return value


def readable_field(value) -> bool:
    """Whether a field's value is one the traced checker evaluates exactly as jaxtyping evaluates its text: an int
    (a symbolic size, under dynamic shapes), a bool, or a string that is an int literal. Anything else (a float, a
    numpy integer, None, a missing attribute, ...) makes the call be checked eagerly (``traced.call_traced``)."""
    if type(value) is int or type(value) is bool or isinstance(value, torch.SymInt):
        return True
    if type(value) is str:
        digits = value.strip()
        if digits[:1] in ("+", "-"):
            digits = digits[1:]
        return digits.isdigit() and digits.isascii()
    return False


def fits_dims(dims: tuple, sizes: tuple, single: dict, bound: dict) -> bool:
    """jaxtyping's ``_check_dims``: a new name binds its size (in place: a failed check leaves what it bound)."""
    for dim, size in zip(dims, sizes, strict=False):  # (as many sizes as dims: fits_shape cut them so)
        kind = dim[0]
        if kind == "anon":
            continue
        if dim[2] and size == 1:
            continue
        if kind == "fixed":
            if size != dim[1]:
                return False
        elif kind == "symbolic":
            value = evaluate(dim[1], single, bound)
            if value is None:  # jaxtyping's AnnotationError (its text), raised while the call is traced
                raise_annotation_error(
                    "Cannot process symbolic axis '" + dim[3] + "' as some axis names have not been processed. "
                    "Have you applied the `jaxtyped` decorator? In practice you should usually only use symbolic "
                    "axes in annotations for return types, referring only to axes annotated for arguments."
                )
            if value != size:
                return False
        elif dim[1] in single:
            if single[dim[1]] != size:
                return False
        else:
            single[dim[1]] = size
    return True


def fits_shape(hint: tuple, shape: tuple, single: dict, variadic: dict, bound: dict) -> bool:
    """jaxtyping's ``_check_shape`` for one tensor."""
    dims, i = hint[2], hint[3]
    if i < 0:
        return len(shape) == len(dims) and fits_dims(dims, shape, single, bound)
    if len(shape) < len(dims) - 1:
        return False
    after = len(dims) - i - 1
    end = len(shape) - after
    if not fits_dims(dims[:i], shape[:i], single, bound):
        return False
    if after and not fits_dims(dims[i + 1 :], shape[end:], single, bound):
        return False
    kind, name, broadcastable = dims[i]
    if kind == "var_anon":
        return True
    new = shape[i:end]
    if name not in variadic:
        variadic[name] = (broadcastable, new, True)  # True: jaxtyping keeps a torch.Size here
        return True
    was_broadcastable, previous, _ = variadic[name]
    joined = join_variadic(was_broadcastable, previous, broadcastable, new)
    if joined is None:
        return False
    if was_broadcastable:
        variadic[name] = (joined[0], joined[1], False)  # np.broadcast_shapes gives a tuple
    return True


def fits(hint: tuple, value, memo: list, bound: dict, contract: Contract) -> bool:
    """Whether ``value`` satisfies ``hint``; ``memo`` = [sizes by name, variadic shapes by name], as jaxtyping's."""
    kind = hint[0]
    if kind == "array":
        if not isinstance(value, torch.Tensor):
            return False
        if hint[1] is not None and value.dtype not in hint[1]:
            return False
        single, variadic = memo[0], memo[1]
        single_before, variadic_before = dict(single), dict(variadic)
        if fits_shape(hint, tuple(value.shape), single, variadic, bound):
            return True
        memo[0], memo[1] = single_before, variadic_before  # jaxtyping's restore: later bindings go to the copies
        return False
    if kind == "none":
        return value is None
    if kind == "literal":  # as beartype: an instance of the literal's type, equal to it (True passes Literal[1])
        for literal, index in zip(hint[1], hint[2], strict=False):  # (one class per value)
            if isinstance(value, contract.classes[index]) and value == literal:
                return True
        return False
    if kind == "class":
        cls = contract.classes[hint[1]]
        if isinstance(value, cls):
            return True
        # a symbolic size (non-strict torch.export runs this on torch.SymInt / SymFloat / SymBool) stands for the
        # Python number it traces: it fits a class its number would (int, float, bool, numbers.Integral, object),
        # as a traced int does under torch.compile
        symbolic = _SYMBOLIC.get(type(value))
        return symbolic is not None and issubclass(symbolic, cls)
    if kind == "callable":
        return callable(value)
    if kind == "union":
        for alternative in hint[1]:
            if fits(alternative, value, memo, bound, contract):
                return True
        return False
    if kind == "tuple":
        if not isinstance(value, tuple) or len(value) != len(hint[1]):
            return False
        for item_hint, item in zip(hint[1], value, strict=False):  # (lengths compared above)
            if not fits(item_hint, item, memo, bound, contract):
                return False
        return True
    if kind == "tuple_of" or kind == "list":
        if not isinstance(value, tuple if kind == "tuple_of" else list):
            return False
        for item in value:
            if not fits(hint[1], item, memo, bound, contract):
                return False
        return True
    if kind == "items_of":  # Sequence[X]: an instance of the class, every item an X
        if not isinstance(value, contract.classes[hint[1]]):
            return False
        for item in value:
            if not fits(hint[2], item, memo, bound, contract):
                return False
        return True
    if kind == "dict":
        if not isinstance(value, dict):
            return False
        for key, item in value.items():
            if not fits(hint[1], key, memo, bound, contract) or not fits(hint[2], item, memo, bound, contract):
                return False
        return True
    return True  # "any"
