"""The sizes of a proof: ranges by the contract's dimension names, the user's assumptions, and the search for a
size that breaks a guard (the counterexample a proof reports, see :mod:`transformer.proofs.prove`)."""

from __future__ import annotations

import ast
import itertools
import random

import sympy

_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_EXHAUSTIVE = 4096  # a range this short is tried whole; a longer one at its ends, its powers of two and at random
_MOST_POINTS = 200_000


class Assumption:
    """A relation the user asserts between sizes (``"k_len == seq"``, ``"seq <= 512"``, ``"q_len <= k_len"``):
    Python's comparison over the dimension names, integers, ``+ - * // %``."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise ValueError(f"assume: {text!r} is not a relation such as 'k_len == seq' or 'seq <= 512'") from None
        if not isinstance(tree, ast.Compare) or len(tree.ops) != 1 or type(tree.ops[0]) not in _OPS:
            raise ValueError(f"assume: {text!r} is not one comparison such as 'k_len == seq' or 'seq <= 512'")
        for node in ast.walk(tree):
            allowed = (ast.Compare, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.USub, ast.Constant, *_OPS)
            allowed += (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
            if not isinstance(node, allowed) or (isinstance(node, ast.Constant) and type(node.value) is not int):
                raise ValueError(f"assume: {text!r} may use only size names, integers, + - * // % and one comparison")
        self.names = sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
        self.op = _OPS[type(tree.ops[0])]
        self.left, self.right = tree.left, tree.comparators[0]
        self._code = compile(ast.Expression(tree), "<assume>", "eval")

    def alias(self) -> tuple[str, str] | None:
        """(a, b) when the assumption is ``a == b`` between two names: the two axes are one size."""
        if self.op == "==" and isinstance(self.left, ast.Name) and isinstance(self.right, ast.Name):
            return self.left.id, self.right.id
        return None

    def bound(self) -> tuple[str, str, int] | None:
        """(name, op, n) when the assumption bounds one name by an integer (``seq <= 512``, ``8 <= seq``)."""
        flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
        left, right = self.left, self.right
        if isinstance(left, ast.Name) and isinstance(right, ast.Constant):
            return left.id, self.op, right.value
        if isinstance(right, ast.Name) and isinstance(left, ast.Constant):
            return right.id, flipped[self.op], left.value
        return None

    def holds(self, values: dict):
        """Whether it holds at ``values`` (name -> int, or numpy arrays: then elementwise)."""
        return eval(self._code, {"__builtins__": {}}, values)


def parse_sizes(text: str) -> dict[str, tuple[int, int]]:
    """``"batch=1..64,seq=1..512"`` (or ``seq=16`` for one size) as ``{"batch": (1, 64), "seq": (1, 512)}``."""
    sizes = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, bounds = part.partition("=")
        low, _, high = bounds.partition("..")
        try:
            sizes[name.strip()] = (int(low), int(high or low))
        except ValueError:
            raise ValueError(f"--sizes: {part!r} is not NAME=LOW..HIGH (say batch=1..64)") from None
    return sizes


def check_ranges(sizes: dict) -> None:
    for name, bounds in sizes.items():
        if (
            not isinstance(bounds, tuple)
            or len(bounds) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            or not 0 <= bounds[0] <= bounds[1]
        ):
            raise ValueError(f"sizes: {name!r} must be (low, high) with 0 <= low <= high, got {bounds!r}")


def candidates(low: int, high: int, example: int, seed: int) -> list[int]:
    """The sizes tried for one name in [low, high]: all when the range is short, else its ends, the example's
    neighbours, the powers of two (and one either side) and some at random."""
    if high - low < _EXHAUSTIVE:
        return list(range(low, high + 1))
    chosen = {low, low + 1, low + 2, high, high - 1, high - 2, example - 1, example, example + 1}
    power = 1
    while power <= high:
        chosen.update((power - 1, power, power + 1))
        power *= 2
    rng = random.Random(seed)
    chosen.update(rng.randint(low, high) for _ in range(256))
    return sorted(v for v in chosen if low <= v <= high)


def relation_text(expr, names: dict) -> str:
    """A guard in the dimension names, as Python writes the comparison (``tgt_len == 1``, ``seq > 4``); a comparison
    is divided by its factors that are sizes or positive numbers (``8*batch*k_len == 8*batch*q_len`` is written
    ``k_len == q_len``: the sizes are named positive, as a proof's ranges start at 1), its terms moved to the side
    where they are added (``seq - 3 > 0`` is ``seq > 3``)."""
    expr = expr.xreplace({s: sympy.Symbol(names.get(str(s), str(s)), positive=True) for s in expr.free_symbols})
    ops = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
    op = next((text for cls, text in ops.items() if isinstance(expr, cls)), None)
    if op is not None:  # lhs - rhs, over its positive factors (the sense of an inequality is kept), split by sign
        difference = sympy.factor(expr.lhs - expr.rhs)
        if isinstance(difference, sympy.Mul):
            kept = [f for f in difference.args if not (f.is_positive and (f.is_Number or f.is_Symbol))]
            difference = sympy.Mul(*kept)
        terms = sympy.Add.make_args(sympy.expand(difference))
        left = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
        right = -sympy.Add(*(t for t in terms if t.could_extract_minus_sign()))
        return f"{sympy.sstr(left)} {op} {sympy.sstr(right)}"
    return _text(expr)


def _text(expr) -> str:
    ops = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
    for cls, op in ops.items():
        if isinstance(expr, cls):
            return f"{sympy.sstr(expr.lhs)} {op} {sympy.sstr(expr.rhs)}"
    if isinstance(expr, sympy.Not):
        return f"not ({_text(expr.args[0])})"
    if isinstance(expr, (sympy.And, sympy.Or)):
        word = " and " if isinstance(expr, sympy.And) else " or "
        return word.join(f"({_text(a)})" for a in expr.args)
    return sympy.sstr(expr)


def counterexample(expr, names: dict, ranges: dict, examples: dict, assumptions: list[Assumption]) -> dict | None:
    """The smallest sizes (in the order of ``ranges``) within the ranges and the assumptions where the guard ``expr``
    is false, or None if it holds at every size tried (every size, for ranges shorter than 4096 each). ``names``:
    torch's symbol -> dimension name (several symbols may stand for one name); a symbol with no name, or a name with
    no range, keeps its example size (``examples``)."""
    expr = expr.xreplace({s: sympy.Symbol(names.get(str(s), str(s)), integer=True) for s in expr.free_symbols})
    if expr == sympy.true:
        return None
    involved = {str(s) for s in expr.free_symbols}
    for assumption in assumptions:
        if set(assumption.names) & involved:
            involved |= set(assumption.names)
    if not involved <= set(ranges) | set(examples):
        return None  # a size the proof has no value for: not decided here (said in the report as not covered)
    involved = [n for n in ranges if n in involved]
    symbols = {str(s): s for s in expr.free_symbols}
    axes = [candidates(*ranges[n], examples.get(n, ranges[n][0]), seed=i) for i, n in enumerate(involved)]
    total = 1
    for axis in axes:
        total *= len(axis)
    points = itertools.product(*axes)
    if total > _MOST_POINTS:
        points = itertools.islice(points, _MOST_POINTS)
    fixed = {symbols[n]: sympy.Integer(v) for n, v in examples.items() if n in symbols and n not in involved}
    expr = expr.xreplace(fixed)
    holds = _evaluator(expr, [symbols.get(n) for n in involved])
    for point in points:
        values = dict(zip(involved, point, strict=True))
        every = {**examples, **values}
        if not all(a.holds(every) for a in assumptions if set(a.names) <= set(every)):
            continue
        if not holds(point):
            return every
    return None


def _evaluator(expr, symbols: list):
    """A function of one point (a size per symbol, None where the guard has none) saying whether ``expr`` holds:
    compiled by sympy's ``lambdify`` to plain Python when it can (``//``, ``%``, max and min as Python's), else
    substituted point by point."""
    present = [(i, s) for i, s in enumerate(symbols) if s is not None]
    python = {"FloorDiv": lambda a, b: a // b, "Mod": lambda a, b: a % b, "PythonMod": lambda a, b: a % b}
    python.update({"CleanDiv": lambda a, b: a // b, "Max": max, "Min": min})
    try:
        compiled = sympy.lambdify([s for _, s in present], expr, modules=[python, "math"])
        compiled(*(2 for _ in present))  # (a function torch's sympy defines that lambdify cannot write fails here)
    except Exception:  # noqa: BLE001 - the slow path below decides every guard

        def substituted(point):
            value = expr.xreplace({s: sympy.Integer(point[i]) for i, s in present})
            return value != sympy.false

        return substituted
    return lambda point: bool(compiled(*(point[i] for i, _ in present)))
