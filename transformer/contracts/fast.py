"""The eager checker of ``checked``: each contract compiled once into straight-line Python (see docs/contracts.md).

jaxtyping with beartype re-reads every annotation at each call (about 200 us per call on a CPU, most of it in
evaluating ``{self.d_model}``-style sizes). Here each contract is read once, when ``checked`` decorates the function,
and turned into the source of one small function: bind the arguments, compare each tensor's dtype and sizes with
the annotation, call the function, compare its result. The comparisons follow jaxtyping's rules exactly (the
grammar of ``transformer.contracts.grammar``, which the traced checker reads too: ``name``, ``#name``, ``*name``,
``*#name``, ``...``, ``_``, fixed sizes, ``{self.x}`` / ``{arg}`` fields and expressions such as ``steps+1``, unions,
``None``, classes, ``Callable`` and fixed-length tuples), binding names in the order beartype checks the arguments.

The fast path only decides *that* a call is valid. Whenever it finds anything else (a violation, a binding it cannot
decide, an expression it would evaluate differently, an exception), it hands the call to jaxtyping, which makes the
final decision and writes the report: an error has exactly the type and text it had before. A contract with an
annotation this module does not replicate (``Sequence[int]``, whose items beartype samples at random, ``Literal``,
``*args``...) is checked by jaxtyping at every call. The report of a call that fails is written by
``transformer.contracts.report``.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable

import jaxtyping
import torch
from jaxtyping import AbstractArray

from .fast_source import BOUND, MAYBE, UNBOUND, CheckerSource
from .grammar import UnsupportedAnnotation, array_dtypes, parse_dims

_EMPTY = inspect.Parameter.empty


class NotFast(ValueError):
    """An annotation the fast path does not replicate exactly: jaxtyping checks every call of this function."""


_OPS = {"+", "-", "*", "/", "//", "%", "**"}


def _fail(src: CheckerSource, fail: str) -> str:
    undo = [line for group in src.restore for line in group]
    return "; ".join(undo + [fail])


def _expression(src: CheckerSource, tree: tuple, alone: bool = False) -> str:
    """A symbolic size as Python source over the bound sizes and the call's arguments; what jaxtyping would not
    evaluate the same way (an unbound name, a field that is not a non-negative int) goes to jaxtyping."""
    kind = tree[0]
    if kind == "const":
        return repr(tree[1])
    if kind == "dim":
        local = src.dim(tree[1])
        if src.single[tree[1]] != BOUND:
            src.emit(f"if {local} is _M: raise _Miss")
        return local
    if kind == "arg":
        if tree[1] not in src.params:
            src.emit("raise _Miss")
            return "0"
        value = src.name("f")
        src.emit(f"{value} = {'.'.join((src.params[tree[1]],) + tuple(tree[2]))}")
        if src.fields_read is not None:
            src.fields_read[(tree[1], tuple(tree[2]))] = value
        # jaxtyping formats the value into the annotation and evaluates the text: the same number for ints >= 0
        # (anything else, a float or a 0-dim tensor, is left to jaxtyping); a field compared alone with a size
        # needs no sign test (a size is never negative)
        src.emit(f"if type({value}) is not int{'' if alone else f' or {value} < 0'}: raise _Miss")
        return value
    if kind == "call":
        return f"{tree[1]}({', '.join(_expression(src, argument) for argument in tree[2:])})"
    if kind in ("neg", "pos"):
        return f"({'-' if kind == 'neg' else '+'}{_expression(src, tree[1])})"
    if tree[1] not in _OPS:
        raise NotFast(f"the operator {tree[1]!r}")
    return f"({_expression(src, tree[2])} {tree[1]} {_expression(src, tree[3])})"


def _dims(src: CheckerSource, dims: tuple, sizes: list[str], fail: str) -> None:
    """jaxtyping's ``_check_dims`` for the axes ``dims`` whose sizes are the expressions ``sizes``."""
    for dim, size in zip(dims, sizes, strict=True):
        kind, value, broadcastable = dim[:3]
        if kind == "anon":
            continue
        guard = None
        if broadcastable:  # a size-1 axis of '#name' is not compared and binds nothing
            guard = src.block(f"if {size} != 1:")
            guard.__enter__()
            outer = src.conditional()
            outer.__enter__()
        if kind == "fixed":
            src.emit(f"if {size} != {value!r}: {_fail(src, fail)}")
        elif kind == "symbolic":
            src.emit(f"if {_expression(src, value, alone=value[0] == 'arg')} != {size}: {_fail(src, fail)}")
        else:
            local, state = src.dim(value), src.single.get(value, UNBOUND)
            if state == BOUND:
                src.emit(f"if {local} != {size}: {_fail(src, fail)}")
            elif state == UNBOUND:
                src.emit(f"{local} = {size}")
            else:
                src.emit(f"if {local} is _M: {local} = {size}")
                src.emit(f"elif {local} != {size}: {_fail(src, fail)}")
            src.single[value] = BOUND
        if guard is not None:
            outer.__exit__(None, None, None)
            guard.__exit__(None, None, None)


def _array(src: CheckerSource, annotation: type, value: str, fail: str) -> None:
    """jaxtyping's ``__instancecheck__`` for one array annotation (a failed check leaves the sizes as they were)."""
    array_type = annotation.array_type
    if not (isinstance(array_type, type) and issubclass(array_type, torch.Tensor)):
        raise NotFast(f"the array type {array_type!r}")
    if getattr(annotation, "_skip_instancecheck", False):
        raise NotFast("a transparent array annotation")
    try:
        dims, variadic_index = parse_dims(annotation.dim_str)
    except UnsupportedAnnotation as error:
        raise NotFast(str(error)) from None
    dtypes = array_dtypes(annotation)
    if src.restore:  # inside a union alternative: undo this check's own bindings if it fails
        names = [src.dim(d[1]) for d in dims if d[0] == "named" and src.single.get(d[1]) != BOUND]
        names += [f"{local}, vb_{local[2:]}" for local in (src.var(d[1]) for d in dims if d[0] == "var")]
        saved = src.name("sv")
        if names:
            src.emit(f"{saved} = ({', '.join(names)},)")
            src.restore.append([f"({', '.join(names)},) = {saved}"])
        else:
            src.restore.append([])
    src.emit(f"if not isinstance({value}, {src.const(array_type, '_T')}): {_fail(src, fail)}")
    if dtypes is not None:
        src.emit(f"if {value}.dtype not in {src.const(frozenset(dtypes), '_D')}: {_fail(src, fail)}")
    shape = src.name("s")
    src.emit(f"{shape} = {value}.shape")
    rank = len(dims)
    top = not src.restore and src.level == 0  # checked on every valid call, where a failure goes to jaxtyping
    same = _same_dims(dims)
    if top and src.returning and same and dims in src.shapes:
        # the return value promises the shape of an argument checked against the same dims (all bound, nothing
        # broadcast): jaxtyping's comparisons reduce to one, with the fields re-read unchanged
        earlier, fields = src.shapes[dims]
        src.emit(f"if {shape} != {earlier}: {_fail(src, fail)}")
        for (param, attributes), local in fields.items():
            src.emit(f"if {'.'.join((src.params[param],) + attributes)} is not {local}: raise _Miss")
        return
    src.fields_read = {} if top and same and not src.returning else None
    if variadic_index < 0:
        if not top or not rank:  # (at the top, unpacking the wrong number of sizes raises: jaxtyping decides)
            src.emit(f"if len({shape}) != {rank}: {_fail(src, fail)}")
        if rank:
            sizes = [src.name("n") for _ in dims]
            src.emit(f"{', '.join(sizes)}, = {shape}")
            _dims(src, dims, sizes, fail)
    else:
        i, after = variadic_index, rank - variadic_index - 1
        # (at the top, with no axis before the variadic one, too short a shape fails to index the axes after it,
        # unless an axis after it is '_', which reads no size: '*batch _' must not pass a 0-d tensor)
        if i or not top or any(d[0] == "anon" for d in dims[i + 1 :]):
            src.emit(f"if len({shape}) < {rank - 1}: {_fail(src, fail)}")
        _dims(src, dims[:i], [f"{shape}[{k}]" for k in range(i)], fail)
        _dims(src, dims[i + 1 :], [f"{shape}[{k - after}]" for k in range(after)], fail)
        kind, name, broadcastable = dims[i]
        if kind == "var":
            new = f"{shape}[{i}:{-after if after else ''}]"
            local, state = src.var(name), src.variadic.get(name, UNBOUND)
            flag = f"vb_{name}"
            if state == UNBOUND:
                src.emit(f"{local} = {new}; {flag} = {broadcastable}")
            elif state == (BOUND, False) and not broadcastable:
                src.emit(f"if {new} != {local}: {_fail(src, fail)}")
            else:
                joined = src.name("j")
                if state == MAYBE:
                    src.emit(f"if {local} is _M: {local} = {new}; {flag} = {broadcastable}")
                    header = "else:"
                else:
                    header = "if True:"
                with src.block(header):
                    src.emit(f"{joined} = _join({flag}, {local}, {broadcastable}, {new})")
                    src.emit(f"if {joined} is None: {_fail(src, fail)}")
                    src.emit(f"{flag}, {local} = {joined}")
            if state == UNBOUND or state == (BOUND, True):
                src.variadic[name] = (BOUND, broadcastable)
            elif state == MAYBE or state == (BOUND, None):
                src.variadic[name] = (BOUND, None)
    if src.fields_read is not None:
        src.shapes.setdefault(dims, (shape, src.fields_read))
        src.fields_read = None
    if src.restore:
        src.restore.pop()


def _same_dims(dims: tuple) -> bool:
    """Whether two shapes that pass these dims one after the other must be equal: every axis bound or fixed (names,
    fixed sizes, fields, '*name'), none broadcast or anonymous."""
    return all(
        not d[2] and (d[0] in ("named", "fixed", "var") or (d[0] == "symbolic" and d[1][0] == "arg")) for d in dims
    )


def _hint(src: CheckerSource, annotation: object, value: str, fail: str) -> None:
    """The check of ``value`` against one annotation, as beartype and jaxtyping make it; ``fail`` is the statement
    that rejects."""
    if annotation is typing.Any or annotation is _EMPTY or annotation is object:
        return
    if annotation is None or annotation is type(None):
        src.emit(f"if {value} is not None: {_fail(src, fail)}")
        return
    if isinstance(annotation, type) and issubclass(annotation, AbstractArray):
        _array(src, annotation, value, fail)
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        _union(src, typing.get_args(annotation), value, fail)
        return
    if origin is tuple:
        items = typing.get_args(annotation)
        if not items or (len(items) == 2 and items[1] is Ellipsis) or items == ((),):
            raise NotFast("a variable-length or empty tuple")
        src.emit(f"if not isinstance({value}, tuple) or len({value}) != {len(items)}: {_fail(src, fail)}")
        for k, item in enumerate(items):
            local = src.name("t")
            src.emit(f"{local} = {value}[{k}]")
            _hint(src, item, local, fail)
        return
    if origin is collections.abc.Callable or annotation is collections.abc.Callable or annotation is typing.Callable:
        src.emit(f"if not callable({value}): {_fail(src, fail)}")  # beartype checks callability only
        return
    if origin is None and isinstance(annotation, type) and not isinstance(annotation, typing._GenericAlias):
        src.emit(f"if not isinstance({value}, {src.const(annotation, '_C')}): {_fail(src, fail)}")
        return
    raise NotFast(f"the annotation {annotation!r}")


def _union(src: CheckerSource, alternatives: tuple, value: str, fail: str) -> None:
    if any(a is typing.Any or a is object for a in alternatives):
        return
    arrays = [a for a in alternatives if isinstance(a, type) and issubclass(a, AbstractArray)]
    plain = [a for a in alternatives if a not in arrays]
    simple = len(arrays) <= 1 and all(
        a is None
        or a is type(None)
        or (
            isinstance(a, type)
            and typing.get_origin(a) is None
            and not isinstance(a, typing._GenericAlias)
            and not issubclass(a, torch.Tensor)
            and not issubclass(torch.Tensor, a)
        )
        for a in plain
    )
    if simple:  # the others bind nothing and never accept a tensor: their order does not matter
        tests = []
        if any(a is None or a is type(None) for a in plain):
            tests.append(f"{value} is None")
        classes = [a for a in plain if a is not None and a is not type(None)]
        if classes:
            tests.append(f"isinstance({value}, {src.const(tuple(classes), '_C')})")
        if not arrays:
            src.emit(f"if not ({' or '.join(tests)}): {_fail(src, fail)}")
            return
        with src.conditional():
            with src.block(f"if not ({' or '.join(tests)}):" if tests else "if True:"):
                _array(src, arrays[0], value, fail)
        return
    ok = src.name("ok")
    src.emit(f"{ok} = False")
    for k, alternative in enumerate(alternatives):  # in the order written, as beartype checks them
        with src.conditional():
            with src.block("while True:" if k == 0 else f"while not {ok}:"):
                outer, src.restore = src.restore, [[]]  # inside an alternative: a failed array check undoes its sizes
                try:
                    _hint(src, alternative, value, "break")
                finally:
                    src.restore = outer
                src.emit(f"{ok} = True")
                src.emit("break")
    src.emit(f"if not {ok}: {_fail(src, fail)}")


def compile_checker(fn: Callable, signature: inspect.Signature, slow: Callable, bad_return: Callable) -> Callable:
    """The eager checked call of ``fn``: ``checker(args, kwargs)`` returns ``fn(*args, **kwargs)`` when the fast path
    finds the call valid, else what ``slow(args, kwargs)`` (arguments) or ``bad_return(args, kwargs, out)`` (return
    value) return. Raises NotFast when the contract holds an annotation this module does not replicate."""
    params = list(signature.parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        raise NotFast("*args or **kwargs")
    locals_ = {p.name: f"a{k}" for k, p in enumerate(params)}
    src = CheckerSource(locals_)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    known = frozenset(p.name for p in params if p.kind != p.POSITIONAL_ONLY)
    src.namespace.update(
        _fn=fn,
        _slow=slow,
        _bad_return=bad_return,
        _cfg=jaxtyping.config,
        _KNOWN=known,
        _POSNAMES=tuple(p.name for p in positional),
    )
    # binding, as Signature.bind does for the calls it accepts (anything else: jaxtyping raises bind's TypeError)
    body_start = len(src.lines)
    src.depth = 2
    src.emit("n = len(args)")
    given: dict[str, str] = {
        p.name: f"g{k}"
        for k, p in enumerate(params)
        if p.default is not _EMPTY and p.annotation is not _EMPTY and p.annotation is not typing.Any
    }

    def bind(p, k: int, how: str) -> str:
        local, flag = locals_[p.name], given.get(p.name)
        if how == "default":
            return f"{local} = {src.const(p.default, '_default')}" + (f"; {flag} = False" if flag else "")
        return f"{local} = {how}" + (f"; {flag} = True" if flag else "")

    required = sum(1 for p in positional if p.default is _EMPTY)
    keyword_only_required = any(p.kind == p.KEYWORD_ONLY and p.default is _EMPTY for p in params)
    with src.block("if not kwargs:"):  # the usual call: arguments by position, trailing defaults left out
        if keyword_only_required:
            src.emit("raise _Miss")
        for count in range(required, len(positional) + 1):
            with src.block(f"{'if' if count == required else 'elif'} n == {count}:"):
                if count:
                    src.emit(f"{', '.join(locals_[p.name] for p in positional[:count])}, = args")
                for p in positional[:count]:
                    if p.name in given:
                        src.emit(f"{given[p.name]} = True")
                for k, p in enumerate(params[count:], count):
                    src.emit(bind(p, k, "default"))
        src.emit("else: raise _Miss")
    with src.block("else:"):  # as Signature.bind does, for the calls it accepts (else bind's TypeError, by jaxtyping)
        src.emit(f"if n > {len(positional)}: raise _Miss")
        src.emit("if not kwargs.keys() <= _KNOWN: raise _Miss")
        src.emit("for k in _POSNAMES[:n]:")
        src.emit("    if k in kwargs: raise _Miss")
        for k, p in enumerate(params):
            default = "raise _Miss" if p.default is _EMPTY else bind(p, k, "default")
            if p.kind != p.KEYWORD_ONLY:
                src.emit(f"if n > {k}: {bind(p, k, f'args[{k}]')}")
                src.emit(f"elif {p.name!r} in kwargs: {bind(p, k, f'kwargs[{p.name!r}]')}")
            else:
                src.emit(f"if {p.name!r} in kwargs: {bind(p, k, f'kwargs[{p.name!r}]')}")
            src.emit(f"else: {default}")
    init_at = len(src.lines)
    for p in params:  # beartype checks the arguments given, in the order of the signature
        if p.annotation is _EMPTY:
            continue
        if p.name in given:
            with src.conditional(), src.block(f"if {given[p.name]}:"):
                _hint(src, p.annotation, locals_[p.name], "raise _Miss")
        else:
            _hint(src, p.annotation, locals_[p.name], "raise _Miss")
    argument_lines = src.lines[body_start:]
    del src.lines[body_start:]
    src.depth = 2
    if signature.return_annotation is not _EMPTY:
        src.returning = True
        _hint(src, signature.return_annotation, "out", "raise _Miss")
    return_lines = src.lines[body_start:]
    del src.lines[body_start:]
    names = sorted(
        {"d_" + n for n in src.single} | {"v_" + n for n in src.variadic} | {"vb_" + n for n in src.variadic}
    )
    init = ["        " + " = ".join(names) + " = _M"] if names else []
    name = "check_" + "".join(c if c.isalnum() else "_" for c in fn.__qualname__)
    lines = [
        f"def {name}(args, kwargs):",
        "    if _cfg.jaxtyping_disable:",
        "        return _fn(*args, **kwargs)",
        "    try:",
        *argument_lines[: init_at - body_start],
        *init,
        *argument_lines[init_at - body_start :],
        "    except Exception:",
        "        return _slow(args, kwargs)",
        "    out = _fn(*args, **kwargs)",
    ]
    if return_lines:
        lines += ["    try:", *return_lines, "    except Exception:", "        return _bad_return(args, kwargs, out)"]
    lines.append("    return out")
    source = "\n".join(lines) + "\n"
    namespace = dict(src.namespace)
    exec(compile(source, f"<contract of {fn.__module__}.{fn.__qualname__}>", "exec"), namespace)
    checker = namespace[name]
    checker.source = source
    return checker
