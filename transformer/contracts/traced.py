"""The contract checker that runs while torch.compile traces (see "torch.compile" in docs/contracts.md).

jaxtyping cannot check while Dynamo traces: its checks misfire on the fake tensors Dynamo traces with
(pytorch#122093, jaxtyping#196). ``transformer.contracts.checked`` hands such calls to :func:`call_traced`, which
checks the same annotations (read once, by :class:`Contract`) in plain Python that Dynamo traces into the graph's
guards, and turns a violation into an operator that raises the eager ``TypeCheckError`` (same first line) when the
compiled graph runs. No graph break, and no check left in a valid graph.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
import typing
from collections.abc import Callable

import torch
from jaxtyping import AbstractArray, AnnotationError, TypeCheckError
from torch import Tensor


def clean_expected(text: str) -> str:
    """``Float[Tensor, 'batch d_model']`` rather than ``<class 'jaxtyping.Float[Tensor, 'batch d_model']'>``."""
    text = text.replace("jaxtyping.", "")
    if text.startswith("<class '") and text.endswith("'>"):
        text = text[8:-2]
    return text



# jaxtyping cannot run while Dynamo traces (its checks misfire on fake tensors, pytorch#122093), and a Python
# exception raised while tracing reaches the user as torch._dynamo.exc.Unsupported ("Observed exception") under
# fullgraph=True. So while compiling, `checked` runs `call_traced`: plain Python over the annotations parsed once by
# `Contract`, which Dynamo traces like the model's own code. With static shapes every comparison is a constant; with
# dynamic shapes each one becomes a guard on the symbolic sizes (or is already decided by them), so a valid graph
# holds no check at all. A violation is not raised while tracing: the call is replaced by `contract_violation`, an
# operator whose fake version returns a placeholder of the promised shape (so tracing goes on, in one graph) and
# whose real version raises the TypeCheckError, formatted with the sizes of the actual call.

_EMPTY = inspect.Parameter.empty
_TRACE_CALLS: list[str] = []  # the checked calls being traced, outermost first: "Outer > Inner: ..." as in eager
# The violations traced so far in this graph: the next one takes the last one's placeholder as input, so that no
# compiler can run it first (eager raises the first violation). Appended only while tracing, where Dynamo replays
# list mutations after the graph has run, i.e. never: a graph holding a violation raises before.
_TRACE_VIOLATIONS: list[Tensor] = []

_COMPILED_NOTE = (
    "\n(raised by a graph compiled with torch.compile: typed-transformer checked this call's contract when "
    "the graph was traced; run it eagerly for jaxtyping's full report)"
)


def _define_violation_operator() -> None:
    @torch.library.custom_op("typed_transformer::contract_violation", mutates_args=())
    def contract_violation(
        message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device,
        after: Tensor | None,
    ) -> Tensor:
        """Raise the contract error (``message`` with ``{}`` for each size), at run time of a compiled graph."""
        raise TypeCheckError(message.format(*sizes) + _COMPILED_NOTE)

    @contract_violation.register_fake
    def _(message: str, sizes: list[int], shape: list[int], dtype: torch.dtype, device: torch.device,
          after: Tensor | None) -> Tensor:
        return torch.empty(shape, dtype=dtype, device=device)  # what the violated call promised: tracing goes on

    # An effect: never removed as dead code, since the error is due even when nothing reads the placeholder.
    op = torch.ops.typed_transformer.contract_violation.default
    try:
        torch.library._register_effectful_op(op, torch._library.effects.EffectType.ORDERED)
    except AttributeError:  # a torch without the effects registry: at least keep it out of dead-code elimination
        torch.fx.node.has_side_effect(op)


if not hasattr(torch.ops.typed_transformer, "contract_violation"):  # once per process (a reload finds it defined)
    _define_violation_operator()
_contract_violation = torch.ops.typed_transformer.contract_violation.default


def _violation(message: str, sizes: list, shape: list, dtype: torch.dtype, device: torch.device) -> Tensor:
    after = _TRACE_VIOLATIONS[-1] if _TRACE_VIOLATIONS else None
    out = _contract_violation(message, sizes, shape, dtype, device, after)
    _TRACE_VIOLATIONS.append(out)
    return out


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _remove_typing(x: object) -> str:
    """As jaxtyping writes an annotation in its messages."""
    x = str(x)
    for prefix in ("jaxtyping.", "typing."):
        for before in (" ", "[", "'"):
            x = x.replace(before + prefix, before)
    return x


def _destring(annotation: object, namespace: dict) -> object:
    """The annotation as jaxtyping resolves it when decorating (``Any`` where a name cannot be resolved yet)."""

    def probe(value):
        del value

    probe.__annotations__ = {"value": annotation}  # (this module's own annotations are strings)
    try:
        return typing.get_type_hints(probe, namespace, include_extras=True)["value"]
    except (NameError, AttributeError, TypeError, SyntaxError):  # not resolvable yet: eager mode checks it
        return typing.Any


def _expected_text(annotation_text: str) -> str:
    """The 'expected' part of the summary line, exactly as ``_summary`` reads it from jaxtyping's message."""
    found = re.search(r"Expected type: (.*?)\.?$", f"Expected type: {annotation_text}.", re.MULTILINE)
    return clean_expected(found.group(1)) if found else "?"


_TORCH_DTYPES = tuple(dict.fromkeys(v for v in vars(torch).values() if isinstance(v, torch.dtype)))
# jaxtyping compares repr(dtype)'s last part with its dtype names; wadler_lindig shortens str(dtype) for messages
_DTYPE_NAME = {dt: repr(dt).rsplit(".", 1)[-1] for dt in _TORCH_DTYPES}
_DTYPE_SHORT = {
    dt: str(dt).rsplit(".")[-1].replace("float", "f").replace("uint", "u").replace("int", "i").replace("complex", "c")
    for dt in _TORCH_DTYPES
}
_PREFERRED_DTYPES = (torch.float32, torch.int64, torch.bool)
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


class _UnsupportedAnnotation(ValueError):
    pass


def _parse_expression(text: str) -> tuple:
    """A symbolic size such as ``steps+1`` or ``{self.d_model}`` as a small tree: jaxtyping fills ``{...}`` from the
    call's arguments, then evaluates the rest over the dimension sizes bound so far."""
    fields: dict[str, tuple] = {}

    def field(match: re.Match) -> str:
        path = match.group(1).strip().split(".")
        if not all(part.isidentifier() for part in path):
            raise _UnsupportedAnnotation(f"the expression {match.group(0)!r}")
        name = f"__field{len(fields)}__"
        fields[name] = ("arg", path[0], tuple(path[1:]))
        return name

    source = re.sub(r"\{([^{}]*)\}", field, text)
    try:
        tree = ast.parse(source, mode="eval").body
    except SyntaxError as error:
        raise _UnsupportedAnnotation(f"the expression {text!r}") from error

    def convert(node: ast.AST) -> tuple:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return ("const", node.value)
        if isinstance(node, ast.Name):
            return fields.get(node.id, ("dim", node.id))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return ("bin", _BINARY[type(node.op)], convert(node.left), convert(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return ("neg" if isinstance(node.op, ast.USub) else "pos", convert(node.operand))
        raise _UnsupportedAnnotation(f"the expression {text!r}")

    return convert(tree)


def _parse_dims(dim_str: str) -> tuple[tuple, int]:
    """jaxtyping's grammar for the dimensions of an array annotation: ``name``, ``#name`` (size 1 broadcasts),
    ``*name`` / ``*#name`` / ``...`` (any number of axes), ``_``, fixed sizes, symbolic expressions, ``{attr}``."""
    dims: list[tuple] = []
    variadic_index = -1
    for index, elem in enumerate(dim_str.split()):
        if "..." in elem:
            if elem != "...":
                raise _UnsupportedAnnotation(f"the axis {elem!r}")
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
                raise _UnsupportedAnnotation(f"the axis {elem!r}")
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
                raise _UnsupportedAnnotation(f"the axis {elem!r}")
            dims.append(("fixed", int(elem), broadcastable))
        else:
            if variadic or anonymous:
                raise _UnsupportedAnnotation(f"the axis {elem!r}")
            dims.append(("symbolic", _parse_expression(elem), broadcastable))
    return tuple(dims), variadic_index


def _array_dtypes(annotation: type) -> tuple | None:
    """The torch dtypes a jaxtyping array annotation accepts (as jaxtyping matches them), None for any (Shaped)."""
    names = annotation.dtypes
    if not isinstance(names, (list, tuple)):  # Shaped: any dtype
        return None
    return tuple(
        dt for dt in _TORCH_DTYPES
        if any((n == _DTYPE_NAME[dt]) if type(n) is str else bool(n.match(_DTYPE_NAME[dt])) for n in names)
    )


def _parse_hint(annotation: object, classes: list) -> tuple | None:
    """An annotation as a tuple the traced checker walks (None: anything goes). Classes go to ``classes``, the
    hint keeps their index: the tables hold only constants Dynamo can take without guards (see ``_spec``)."""
    if annotation is typing.Any or annotation is _EMPTY:
        return None
    if annotation is None or annotation is type(None):
        return ("none",)
    if isinstance(annotation, type) and issubclass(annotation, AbstractArray):
        if annotation.array_type is not torch.Tensor:
            raise _UnsupportedAnnotation(f"the array type {annotation.array_type!r}")
        dims, variadic_index = _parse_dims(annotation.dim_str)
        return ("array", _array_dtypes(annotation), dims, variadic_index)
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        alternatives = tuple(_parse_hint(a, classes) for a in typing.get_args(annotation))
        return None if any(a is None for a in alternatives) else ("union", alternatives)
    if origin is tuple:
        items = typing.get_args(annotation)
        if len(items) == 2 and items[1] is Ellipsis:
            raise _UnsupportedAnnotation("variable-length tuples")
        return ("tuple", tuple(_parse_hint(a, classes) or ("any",) for a in items))
    if isinstance(annotation, type) and origin is None:
        classes.append(annotation)
        return ("class", len(classes) - 1)
    return None  # Callable[...], generics, protocols: left to the eager checker


def _fields(hint: tuple | None) -> tuple:
    """The ``{name.attr}`` fields an annotation reads, as ``(name, attributes)`` pairs, first seen first."""
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

    walk(hint)
    return tuple(found)


def field_text(fields: tuple, bound: dict, sizes: list | None = None) -> str:
    """`` (self.d_model=512)``: the values of an annotation's fields in this call, for the message's first line
    (``sizes``: traced, each int becomes ``{}`` and goes into ``sizes``). Empty when the annotation reads none."""
    parts = []
    for name, attributes in fields:
        if name not in bound:
            continue
        value, found = bound[name], True
        for attribute in attributes:
            if not hasattr(value, attribute):
                found = False
                break
            value = getattr(value, attribute)
        if not found:
            continue
        path = name + "".join("." + a for a in attributes)
        if sizes is not None and isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
            sizes.append(value)
            parts.append(path + "={}")
        elif sizes is not None:
            parts.append(path + "=" + _escape(repr(value)))
        else:
            parts.append(path + "=" + repr(value))
    return " (" + ", ".join(parts) + ")" if parts else ""


class Contract:
    """``fn``'s signature and annotations, read once, as the traced checker needs them."""

    __slots__ = ("_classes", "checks", "classes", "defaults", "fields", "params", "qualname", "result", "spec",
                 "unsupported")

    def __init__(self, fn: Callable, signature: inspect.Signature | None = None) -> None:
        """``signature``: ``fn``'s, with its annotations already resolved (by ``contracts_fast.resolved_signature``,
        as jaxtyping resolves them); read from ``fn`` when not given."""
        self.qualname = _escape(fn.__qualname__)
        self.unsupported: list[str] = []
        self._classes: list[type] = []
        resolved = signature is not None
        signature = signature if resolved else inspect.signature(fn)
        params, checks = [], []
        for position, p in enumerate(signature.parameters.values()):
            positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            params.append((p.name, position if positional else -1, p.kind == p.VAR_POSITIONAL,
                           p.kind == p.VAR_KEYWORD, p.default is not _EMPTY))
            annotation = p.annotation
            if annotation is not _EMPTY and not resolved:
                annotation = _destring(annotation, fn.__globals__)
            hint = self._hint(annotation, p.name)
            if hint is not None:
                checks.append((p.name, hint, _escape(_expected_text(_remove_typing(annotation))), _fields(hint)))
        self.params, self.checks = tuple(params), tuple(checks)
        #: per checked argument (and "return"): the ``{name.attr}`` fields its annotation reads, for the messages
        self.fields = {check[0]: check[3] for check in checks}
        self.result = None
        if signature.return_annotation is not _EMPTY:
            annotation = signature.return_annotation
            if not resolved:
                annotation = _destring(annotation, fn.__globals__)
            hint = self._hint(annotation, "return")
            if hint is not None:
                text = _remove_typing(annotation)
                if text.startswith("<class '") and text.endswith("'>"):
                    text = text[8:-2]
                self.result = (hint, _escape(_expected_text(text)), _fields(hint))
                self.fields["return"] = self.result[2]
        self.spec = (self.qualname, self.params, self.checks, self.result)
        self.classes = tuple(self._classes)
        self.defaults = tuple(p.default for p in signature.parameters.values())

    def _hint(self, annotation: object, name: str) -> tuple | None:
        try:
            return _parse_hint(annotation, self._classes)
        except _UnsupportedAnnotation as error:
            self.unsupported.append(f"{name}: {error}")
            return None


def _bind(params: tuple, args: tuple, kwargs: dict, contract: Contract) -> tuple[dict, dict]:
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


def _evaluate(tree: tuple, single: dict, bound: dict):
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "dim":
        return single.get(tree[1])  # None: not bound (yet)
    if kind == "arg":
        value = bound[tree[1]]
        for attribute in tree[2]:
            value = getattr(value, attribute)
        return value
    if kind == "neg" or kind == "pos":
        a = _evaluate(tree[1], single, bound)
        return None if a is None else (-a if kind == "neg" else a)
    a, b = _evaluate(tree[2], single, bound), _evaluate(tree[3], single, bound)
    if a is None or b is None:
        return None
    op = tree[1]
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


def _fits_dims(dims: tuple, sizes: tuple, single: dict, bound: dict) -> bool:
    """jaxtyping's ``_check_dims``: a new name binds its size (in place: a failed check leaves what it bound)."""
    for dim, size in zip(dims, sizes):
        kind = dim[0]
        if kind == "anon":
            continue
        if dim[2] and size == 1:
            continue
        if kind == "fixed":
            if size != dim[1]:
                return False
        elif kind == "symbolic":
            value = _evaluate(dim[1], single, bound)
            if value is None:
                raise AnnotationError(f"Cannot process symbolic axis {dim[1]!r}: some axis names are not bound yet")
            if value != size:
                return False
        elif dim[1] in single:
            if single[dim[1]] != size:
                return False
        else:
            single[dim[1]] = size
    return True


def _same(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x != y:
            return False
    return True


def _broadcast(a: tuple, b: tuple) -> tuple | None:
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


def _fits_shape(hint: tuple, shape: tuple, single: dict, variadic: dict, bound: dict) -> bool:
    """jaxtyping's ``_check_shape`` for one tensor."""
    dims, i = hint[2], hint[3]
    if i < 0:
        return len(shape) == len(dims) and _fits_dims(dims, shape, single, bound)
    if len(shape) < len(dims) - 1:
        return False
    after = len(dims) - i - 1
    end = len(shape) - after
    if not _fits_dims(dims[:i], shape[:i], single, bound):
        return False
    if after and not _fits_dims(dims[i + 1:], shape[end:], single, bound):
        return False
    kind, name, broadcastable = dims[i]
    if kind == "var_anon":
        return True
    new = shape[i:end]
    if name not in variadic:
        variadic[name] = (broadcastable, new, True)  # True: jaxtyping keeps a torch.Size here
        return True
    was_broadcastable, previous, _ = variadic[name]
    if was_broadcastable:
        joint = _broadcast(new, previous)
        if joint is None or (not broadcastable and not _same(joint, new)):
            return False
        variadic[name] = (broadcastable, joint, False)  # np.broadcast_shapes gives a tuple
        return True
    if broadcastable:
        joint = _broadcast(new, previous)
        return joint is not None and _same(joint, previous)
    return _same(new, previous)


def _fits(hint: tuple, value, memo: list, bound: dict, contract: Contract) -> bool:
    """Whether ``value`` satisfies ``hint``; ``memo`` = [sizes by name, variadic shapes by name], as jaxtyping's."""
    kind = hint[0]
    if kind == "array":
        if not isinstance(value, torch.Tensor):
            return False
        if hint[1] is not None and value.dtype not in hint[1]:
            return False
        single, variadic = memo[0], memo[1]
        single_before, variadic_before = dict(single), dict(variadic)
        if _fits_shape(hint, tuple(value.shape), single, variadic, bound):
            return True
        memo[0], memo[1] = single_before, variadic_before  # jaxtyping's restore: later bindings go to the copies
        return False
    if kind == "none":
        return value is None
    if kind == "class":
        return isinstance(value, contract.classes[hint[1]])
    if kind == "union":
        for alternative in hint[1]:
            if _fits(alternative, value, memo, bound, contract):
                return True
        return False
    if kind == "tuple":
        if not isinstance(value, tuple) or len(value) != len(hint[1]):
            return False
        for item_hint, item in zip(hint[1], value):
            if not _fits(item_hint, item, memo, bound, contract):
                return False
        return True
    return True  # "any"


def _note_sizes(hint: tuple, value, single: dict) -> None:
    """Record the sizes a tensor gives to names not bound yet, without checking anything."""
    if hint[0] == "union":
        for alternative in hint[1]:
            _note_sizes(alternative, value, single)
    elif hint[0] == "array" and hint[3] < 0 and isinstance(value, torch.Tensor) and value.dim() == len(hint[2]):
        for dim, size in zip(hint[2], value.shape):
            if dim[0] == "named" and dim[1] not in single:
                single[dim[1]] = size


def _value_text(value, sizes: list, top: bool = True) -> str:
    """jaxtyping's short form of a value (``bool[3,5,5]``), with ``{}`` for each size, which goes into ``sizes``."""
    if isinstance(value, torch.Tensor):
        sizes.extend(value.shape)
        text = _DTYPE_SHORT[value.dtype] + "[" + ",".join(["{}"] * value.dim()) + "]"
        return text if top else text + "(torch)"
    if value is None or isinstance(value, (bool, float, str)):
        return _escape(repr(value))
    if isinstance(value, (int, torch.SymInt)):
        sizes.append(value)
        return "{}"
    if isinstance(value, (tuple, list)):
        items = [_value_text(item, sizes, top=False) for item in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    return _escape(type(value).__name__) + "(...)"


def _describe(subject: str, value, expected: str, single: dict, variadic: dict, fields: tuple,
              bound: dict) -> tuple[str, list]:
    """``_summary``'s line for a violation: a format string with ``{}`` for every size, and the sizes."""
    sizes: list = []
    actual = _value_text(value, sizes)
    expected = expected + field_text(fields, bound, sizes)
    bound = []
    for name, size in single.items():
        bound.append(name + "={}")
        sizes.append(size)
    for name, (_, shape, is_size) in variadic.items():
        sizes.extend(shape)
        inner = ", ".join(["{}"] * len(shape))
        if is_size:
            bound.append(name + "=torch.Size([" + inner + "])")
        else:
            bound.append(name + "=(" + inner + ("," if len(shape) == 1 else "") + ")")
    with_sizes = " with " + ", ".join(bound) if bound else ""
    return subject + " is " + actual + ", expected " + expected + with_sizes, sizes


def _placeholder_shape(hint: tuple, single: dict, variadic: dict, bound: dict) -> list:
    """The shape a tensor annotation promises, from the sizes bound so far (1 for what is not bound)."""
    shape: list = []
    for dim in hint[2]:
        kind = dim[0]
        if kind in ("named",) and dim[1] in single:
            shape.append(single[dim[1]])
        elif kind == "fixed":
            shape.append(dim[1])
        elif kind == "symbolic":
            value = _evaluate(dim[1], single, bound)
            shape.append(1 if value is None else value)
        elif kind == "var":
            if dim[1] in variadic:
                shape.extend(variadic[dim[1]][1])
        elif kind != "var_anon":
            shape.append(1)
    return shape


def _placeholder(hint: tuple, message: str, sizes: list, memo: list, bound: dict):
    """What the violated call returns while tracing: the violation operator's output, shaped as promised."""
    kind = hint[0]
    if kind == "union":
        for alternative in hint[1]:
            if alternative[0] in ("array", "tuple", "none"):
                return _placeholder(alternative, message, sizes, memo, bound)
    if kind == "tuple" and all(item[0] == "array" for item in hint[1]):
        return tuple(_placeholder(item, message, sizes, memo, bound) for item in hint[1])
    if kind == "none":
        _violation(message, sizes, [0], torch.float32, torch.device("cpu"))
        return None
    if kind != "array":
        raise TypeCheckError(_unformatted(message))
    tensors = [v for v in bound.values() if isinstance(v, torch.Tensor)]
    dtype = None
    allowed = hint[1]
    for t in tensors:
        if allowed is None or t.dtype in allowed:
            dtype = t.dtype
            break
    if dtype is None and allowed is None:
        dtype = torch.float32
    if dtype is None:
        for candidate in _PREFERRED_DTYPES:
            if candidate in allowed:
                dtype = candidate
                break
    if dtype is None:
        dtype = allowed[0]
    device = tensors[0].device if tensors else torch.device("cpu")
    return _violation(message, sizes, _placeholder_shape(hint, memo[0], memo[1], bound), dtype, device)


def _unformatted(message: str) -> str:
    """A violation that cannot stay in the graph (the function promises no tensor to stand in for its result) is
    raised while tracing: Dynamo reports it as torch._dynamo.exc.Unsupported under fullgraph=True, and without
    fullgraph runs the call eagerly, where jaxtyping raises it."""
    return (message.replace("{}", "?").replace("{{", "{").replace("}}", "}")
            + "\n(under torch.compile a violated contract stays in the graph only for functions returning tensors)")


def _spec(contract: Contract) -> tuple:
    """The contract's tables. Read through ``assume_constant_result``, Dynamo takes them as constants, with no guard
    on their contents (they never change): one identity guard per contract instead of one guard per entry."""
    return contract.spec


# = torch.compiler.assume_constant_result(_spec), which sets just this attribute but imports Dynamo first (about a
# second at import, in every process, compiling or not). tests/test_contracts.py checks the two agree.
_spec._dynamo_marked_constant = True  # type: ignore[attr-defined]


def call_traced(contract: Contract, fn: Callable, args: tuple, kwargs: dict):
    """``fn(*args, **kwargs)`` under its contract, as Dynamo traces it (see the comment above)."""
    qualname, params, checks, result = _spec(contract)
    _TRACE_CALLS.append(qualname)
    try:
        bound, given = _bind(params, args, kwargs, contract)
        single: dict = {}
        variadic: dict = {}
        memo = [single, variadic]
        failure = None
        for name, hint, expected, fields in checks:
            if name not in given:
                continue
            if failure is not None:  # the other arguments still name sizes, for the placeholder's shape
                _note_sizes(hint, given[name], memo[0])
            elif not _fits(hint, given[name], memo, bound, contract):
                failure = _describe("argument '" + name + "'", given[name], expected, single, variadic, fields,
                                    bound)
        if failure is None:
            out = fn(*args, **kwargs)
            if result is None or _fits(result[0], out, memo, bound, contract):
                return out
            failure = _describe("the return value", out, result[1], single, variadic, result[2], bound)
        template, sizes = failure
        message = " > ".join(_TRACE_CALLS) + ": " + template
    finally:
        _TRACE_CALLS.pop()
    if result is None:
        raise TypeCheckError(_unformatted(message))
    return _placeholder(result[0], message, sizes, memo, bound)
