"""The generator of the contracts' differential fuzzer (``tests/contracts_fuzz.py``): random signatures over the whole
annotation grammar, and calls that fit, nearly fit and do not fit them (see that module).
"""

from __future__ import annotations

import random
import typing
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Bool, Float, Int, Integer, Num, Real, Shaped
from torch import Tensor

NAMES = ("a", "b", "c", "n")
KINDS = {
    "Float": (torch.float32, torch.float64, torch.float16),
    "Int": (torch.int64, torch.int32, torch.uint8),
    "Bool": (torch.bool,),
    "Shaped": (torch.float32, torch.int64, torch.bool),
    "Integer": (torch.int64, torch.uint8),
    "Real": (torch.float32, torch.int64),
    "Num": (torch.float32, torch.int32),
}
ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool)
NAMESPACE = dict(Float=Float, Int=Int, Bool=Bool, Shaped=Shaped, Integer=Integer, Real=Real, Num=Num, Tensor=Tensor)
NAMESPACE.update(np=np, typing=typing, Literal=typing.Literal)


class Holder:
    """``self`` of every generated function: the ``{self.x}`` fields."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Holder({self.__dict__})"


# ------------------------------------------------------------------------------------------------ annotations
@dataclass
class Axis:
    text: str  # as written in the annotation
    kind: str  # named, fixed, anon, var, var_anon, symbolic, unreadable
    name: str | None = None
    broadcast: bool = False
    size: object = None  # fixed size, or the expression (python source over names, fields substituted later)


@dataclass
class Array:
    kind: str  # Float, Int, ...
    axes: list
    array_type: str = "Tensor"

    def text(self) -> str:
        return f'{self.kind}[{self.array_type}, "{" ".join(a.text for a in self.axes)}"]'


@dataclass
class Hint:
    """An annotation: ``form`` is array, optional, union, tuple, tuple_of, list, dict, class, literal, none."""

    form: str
    items: list = field(default_factory=list)
    text: str = ""


def _axis(rng: random.Random, features: set, variadic_used: bool, allow_unreadable: bool) -> Axis:
    roll = rng.random()
    name = rng.choice(NAMES)
    if roll < 0.30:
        features.add("named")
        return Axis(name, "named", name)
    if roll < 0.40:
        features.add("fixed")
        size = rng.choice((1, 2, 3))
        return Axis(str(size), "fixed", size=size)
    if roll < 0.48:
        features.add("anon")
        return Axis("_", "anon")
    if roll < 0.58:
        features.add("broadcast")
        return Axis("#" + name, "named", name, broadcast=True)
    if roll < 0.74 and not variadic_used:
        which = rng.random()
        if which < 0.4:
            features.add("*name")
            return Axis("*v" + name, "var", "v" + name)
        if which < 0.7:
            features.add("...")
            return Axis("...", "var_anon")
        if which < 0.85:
            features.add("*#name")
            return Axis("*#v" + name, "var", "v" + name, broadcast=True)
        features.add("*_")
        return Axis("*_", "var_anon")
    if roll < 0.90:
        features.add("symbolic")
        other = rng.choice(NAMES)
        expression = rng.choice(
            (
                f"{name}+1",
                f"{name}-1",
                f"{name}*2",
                f"{name}*{other}",
                f"{name}//2",
                "{self.k}",
                "{self.k}+1",
                "{self.k}**2",
                f"{name}+{{self.k}}",
                "{m}",
                "{m}*2",
            )
        )
        if "self.k" in expression:
            features.add("{self.x}")
        if "{m}" in expression:
            features.add("{arg}")
        return Axis(expression, "symbolic", size=expression)
    if allow_unreadable and roll < 0.96:
        features.add("unreadable")
        other = rng.choice(NAMES)
        expression = rng.choice((f"min({name},{other})", f"max({name},1)", f"abs({name}-1)", "2.0", "?" + name))
        if expression.startswith("?"):
            return Axis(expression, "named", name)
        return Axis(expression, "symbolic", size=expression)
    features.add("named")
    return Axis(name, "named", name)


def _array(rng: random.Random, features: set, allow_unreadable: bool) -> Array:
    kind = rng.choice(tuple(KINDS))
    features.add("dtype:" + kind)
    axes, variadic = [], False
    for _ in range(rng.choice((0, 1, 1, 2, 2, 2, 3, 3))):
        axis = _axis(rng, features, variadic, allow_unreadable)
        variadic = variadic or axis.kind in ("var", "var_anon")
        axes.append(axis)
    array_type = "Tensor"
    if allow_unreadable and rng.random() < 0.03:
        array_type = "np.ndarray"
        features.add("unreadable")
        features.add("np.ndarray")
    return Array(kind, axes, array_type)


def _hint(rng: random.Random, features: set, depth: int = 0, allow_unreadable: bool = True) -> Hint:
    roll = rng.random() if depth == 0 else rng.random() * 0.6
    if roll < 0.45:
        array = _array(rng, features, allow_unreadable)
        return Hint("array", [array], array.text())
    if roll < 0.55:
        features.add("optional")
        inner = _hint(rng, features, depth + 1, allow_unreadable)
        return Hint("optional", [inner], f"{inner.text} | None")
    if roll < 0.62:
        features.add("union")
        a, b = _array(rng, features, allow_unreadable), _array(rng, features, allow_unreadable)
        return Hint("union", [Hint("array", [a], a.text()), Hint("array", [b], b.text())], f"{a.text()} | {b.text()}")
    if roll < 0.66:
        features.add("class")
        name = rng.choice(("int", "float", "bool", "str"))
        return Hint("class", [name], name)
    if roll < 0.68:
        features.add("literal")
        return Hint("literal", [(1, 2)], "Literal[1, 2]")
    if depth >= 2:
        array = _array(rng, features, allow_unreadable)
        return Hint("array", [array], array.text())
    if roll < 0.80:
        features.add("tuple")
        items = [_hint(rng, features, depth + 1, allow_unreadable) for _ in range(rng.choice((1, 2, 2)))]
        return Hint("tuple", items, "tuple[" + ", ".join(i.text for i in items) + "]")
    if roll < 0.87:
        features.add("tuple_of")
        inner = _hint(rng, features, depth + 1, allow_unreadable)
        return Hint("tuple_of", [inner], f"tuple[{inner.text}, ...]")
    if roll < 0.94:
        features.add("list")
        inner = _hint(rng, features, depth + 1, allow_unreadable)
        return Hint("list", [inner], f"list[{inner.text}]")
    features.add("dict")
    inner = _hint(rng, features, depth + 1, allow_unreadable)
    return Hint("dict", [inner], f"dict[str, {inner.text}]")


@dataclass
class Signature:
    source: str
    params: list  # (name, Hint or None, how: "pos" / "star" / "starstar")
    result: Hint | None
    features: set
    fields: dict  # the Holder's fields
    fn: typing.Any = None

    def build(self):
        namespace = dict(NAMESPACE)
        exec(compile(self.source, "<contracts_fuzz>", "exec"), namespace)
        self.fn = namespace["f"]
        return self.fn


def random_signature(rng: random.Random, allow_unreadable: bool = True) -> Signature:
    features: set = set()
    params = []
    parts = ["self", "m: int"]
    for k in range(rng.choice((1, 2, 2, 3))):
        hint = _hint(rng, features, allow_unreadable=allow_unreadable)
        params.append((f"x{k}", hint, "pos"))
        parts.append(f"x{k}: {hint.text}")
    if rng.random() < 0.06:
        features.add("*args")
        array = _array(rng, features, allow_unreadable)
        hint = Hint("array", [array], array.text())
        params.append(("rest", hint, "star"))
        parts.append(f"*rest: {hint.text}")
    elif rng.random() < 0.05:
        features.add("**kwargs")
        array = _array(rng, features, allow_unreadable)
        hint = Hint("array", [array], array.text())
        params.append(("more", hint, "starstar"))
        parts.append("result=None")
        parts.append(f"**more: {hint.text}")
    if "result=None" not in parts:
        parts.append("result=None")
    result = _hint(rng, features, allow_unreadable=allow_unreadable) if rng.random() < 0.7 else None
    if result is not None:
        features.add("return")
    arrow = f" -> {result.text}" if result is not None else ""
    source = f"def f({', '.join(parts)}){arrow}:\n    return result\n"
    k_field: object = rng.choice((0, 1, 2, 3, 3, 2))
    other = rng.random()
    if other < 0.06:
        k_field, _ = -rng.choice((1, 2, 3)), features.add("field:negative")
    elif other < 0.10:
        k_field, _ = str(rng.choice((1, 2, 3))), features.add("field:str")
    elif other < 0.14:
        k_field, _ = np.int64(rng.choice((1, 2, 3))), features.add("field:numpy")
    elif other < 0.16:
        k_field, _ = None, features.add("field:None")
    return Signature(source, params, result, features, {"k": k_field})


# ------------------------------------------------------------------------------------------------------ values
class World:
    """The sizes a fitting call binds: names, variadic shapes, the fields."""

    def __init__(self, rng: random.Random, fields: dict, m: int):
        self.rng = rng
        self.single = {name: rng.choice((0, 1, 2, 3, 3, 4)) for name in NAMES}
        self.variadic: dict = {}
        self.fields = fields
        self.m = m

    def shape_of(self, name: str) -> tuple:
        if name not in self.variadic:
            self.variadic[name] = tuple(self.rng.choice((1, 2, 3)) for _ in range(self.rng.choice((0, 1, 2))))
        return self.variadic[name]

    def evaluate(self, expression: str):
        arguments = {"self": Holder(**self.fields), "m": self.m}
        try:
            text = eval(f"f'{expression}'", arguments.copy())  # as jaxtyping fills the fields
            return eval(text, dict(self.single))
        except Exception:
            return None


def _fitting_shape(rng: random.Random, array: Array, world: World) -> list:
    shape: list = []
    for axis in array.axes:
        if axis.kind == "named":
            size = world.single[axis.name.lstrip("?")]
            shape.append(1 if axis.broadcast and rng.random() < 0.3 else size)
        elif axis.kind == "fixed":
            shape.append(axis.size)
        elif axis.kind == "anon":
            shape.append(rng.choice((1, 2, 3)))
        elif axis.kind == "var":
            own = list(world.shape_of(axis.name))
            if axis.broadcast and own and rng.random() < 0.3:
                own[rng.randrange(len(own))] = 1
            shape.extend(own)
        elif axis.kind == "var_anon":
            shape.extend(rng.choice((1, 2)) for _ in range(rng.choice((0, 1, 2))))
        else:  # symbolic
            value = world.evaluate(axis.size)
            shape.append(value if isinstance(value, int) and 0 <= value < 9 else rng.choice((0, 1, 2)))
    return shape


def _tensor(rng: random.Random, shape: list, dtype: torch.dtype, features: set) -> torch.Tensor:
    roll = rng.random()
    if roll < 0.08 and shape:
        features.add("value:non-contiguous")
        return torch.zeros(list(reversed(shape)), dtype=dtype).permute(*reversed(range(len(shape))))
    if roll < 0.14 and shape:
        features.add("value:expanded")
        return torch.zeros([1] * len(shape), dtype=dtype).expand(*shape)
    return torch.zeros(shape, dtype=dtype)


def _value(rng: random.Random, hint: Hint, world: World, p_wrong: float, features: set):
    """A value near ``hint``: fitting, or broken in one way with probability ``p_wrong``."""
    form = hint.form
    if form == "array":
        array = hint.items[0]
        shape = _fitting_shape(rng, array, world)
        dtype = rng.choice(KINDS[array.kind])
        if rng.random() < p_wrong:
            how = rng.random()
            if how < 0.35 and shape:
                k = rng.randrange(len(shape))
                shape[k] = max(0, shape[k] + rng.choice((-1, 1)))
                features.add("value:off-by-one")
            elif how < 0.45 and shape:
                shape[rng.randrange(len(shape))] = 1
                features.add("value:size-1")
            elif how < 0.55 and shape:
                shape[rng.randrange(len(shape))] = 0
                features.add("value:zero-size")
            elif how < 0.62 and shape:
                del shape[rng.randrange(len(shape))]
                features.add("value:rank-short")
            elif how < 0.65 and shape:
                del shape[rng.randrange(len(shape)) :]
                features.add("value:rank-cut")
            elif how < 0.75:
                shape.insert(rng.randrange(len(shape) + 1), rng.choice((1, 2)))
                features.add("value:rank-long")
            elif how < 0.88:
                dtype = rng.choice(ALL_DTYPES)
                features.add("value:dtype")
            elif how < 0.93:
                features.add("value:numpy")
                return np.zeros(shape, dtype=np.float32)
            else:
                features.add("value:not-a-tensor")
                return rng.choice((None, 3, "x", [1]))
        if array.array_type != "Tensor":
            return np.zeros(shape, dtype=np.float32)
        return _tensor(rng, shape, dtype, features)
    if form == "optional":
        if rng.random() < 0.3:
            return None
        return _value(rng, hint.items[0], world, p_wrong, features)
    if form == "union":
        return _value(rng, rng.choice(hint.items), world, p_wrong, features)
    if form == "class":
        wrong = rng.random() < p_wrong
        name = rng.choice(("int", "float", "bool", "str")) if wrong else hint.items[0]
        return {"int": 2, "float": 0.5, "bool": True, "str": "s"}[name]
    if form == "literal":
        return rng.choice((1, 2, 3, True, 1.0)) if rng.random() < p_wrong else rng.choice((1, 2))
    if form == "tuple":
        items = [_value(rng, item, world, p_wrong / 2, features) for item in hint.items]
        if rng.random() < p_wrong / 3:
            return items  # a list, not a tuple
        if rng.random() < p_wrong / 3:
            items = items[:-1]
        return tuple(items)
    if form in ("tuple_of", "list"):
        # beartype checks one item, drawn at random: the same item repeated keeps the oracle deterministic
        items = [_value(rng, hint.items[0], world, p_wrong / 3, features)] * rng.choice((0, 1, 1, 2, 3))
        if rng.random() < p_wrong / 4:
            return tuple(items) if form == "list" else items
        return items if form == "list" else tuple(items)
    if form == "dict":
        item = _value(rng, hint.items[0], world, p_wrong / 3, features)
        return {f"k{j}": item for j in range(rng.choice((0, 1, 2)))}
    return None


@dataclass
class Call:
    args: tuple
    kwargs: dict
    features: set


def random_call(rng: random.Random, signature: Signature, p_wrong: float = 0.3) -> Call:
    features: set = set()
    m = rng.choice((1, 2, 3))
    world = World(rng, signature.fields, m)
    holder = Holder(**signature.fields)
    args: list = [holder, m]
    kwargs: dict = {}
    for _name, hint, how in signature.params:
        if how == "pos":
            args.append(_value(rng, hint, world, p_wrong, features))
        elif how == "star":
            args.extend(_value(rng, hint, world, p_wrong, features) for _ in range(rng.choice((0, 1, 2))))
        else:
            kwargs.update({f"e{j}": _value(rng, hint, world, p_wrong, features) for j in range(rng.choice((0, 1, 2)))})
    if signature.result is not None:
        kwargs["result"] = _value(rng, signature.result, world, p_wrong, features)
    return Call(tuple(args), kwargs, features)
