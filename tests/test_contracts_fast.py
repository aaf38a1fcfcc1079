"""The eager fast path of ``checked`` (transformer/contracts/fast.py) decides every call as jaxtyping + beartype do.

The fast path only ever accepts a call; whatever it does not accept goes to jaxtyping, which decides and reports. So
two things could go wrong: the fast path accepts a call jaxtyping refuses (a contract silently skipped), or refuses
one jaxtyping accepts (a slow path taken for nothing). The property test below runs random calls, valid and broken
in every way the annotations can be broken, through the generated checker alone and through jaxtyping, and requires
the same decision on each.
"""

import inspect
import random
from collections.abc import Callable

import pytest
import torch
from beartype import beartype
from jaxtyping import jaxtyped

import transformer as T
from transformer.cache import KVCache
from transformer.contracts import Bool, Float, Int, Shaped, Tensor, TypeCheckError, checked
from transformer.contracts.fast import NotFast, compile_checker
from transformer.contracts.grammar import resolved_signature
from transformer.masks import AttentionMask

REFUSED_ARGUMENTS, REFUSED_RETURN = object(), object()


class Net:
    def __init__(self, d_model, heads):
        self.d_model, self.heads = d_model, heads

    def attend(
        self,
        x: Float[Tensor, "batch seq {self.d_model}"],
        mask: Bool[Tensor, "#batch #seq k_len"] | AttentionMask | None,
        cache: KVCache | None = None,
        *,
        scale: float | None = None,
        steps: int = 2,
        limit: int = None,
        result=None,
    ) -> Float[Tensor, "batch seq {self.d_model}"]:
        return result

    def heads_of(
        self, x: Float[Tensor, "*batch {self.d_model}"]
    ) -> Float[Tensor, "*batch {self.heads} {self.d_model}/{self.heads}"]:
        return self.result


def batched(
    x: Float[Tensor, "*batch n"], y: Float[Tensor, "*#batch n"], z: Shaped[Tensor, "... 3"], result=None
) -> Float[Tensor, "*batch n"]:
    return result


def split(
    x: Float[Tensor, "b d"], y: Float[Tensor, "b h d/h"], k: Int[Tensor, "b _"], flag: bool, result=None
) -> tuple[Float[Tensor, "b h d/h"], Int[Tensor, "b"]]:  # noqa: F821 (a jaxtyping dimension)
    return result


def step(
    ys: Int[Tensor, "b steps"], scores: Float[Tensor, "b steps+1"], fn: Callable[[Tensor], Tensor], result=None
) -> Int[Tensor, "b steps+1"]:
    return result


def either(
    x: Float[Tensor, "b n 2"] | Float[Tensor, "c b n"], y: Float[Tensor, "n c"], result=None
) -> Float[Tensor, "b n"] | None:
    return result


def scalars(
    x: Float[Tensor, ""],
    w: Float[Tensor, "_ #1 d"],  # noqa: F821 (a jaxtyping dimension)
    v: Bool[Tensor, "*#rest 2"],
    n: int,
    result=None,
) -> Float[Tensor, "d"]:  # noqa: F821 (a jaxtyping dimension)
    return result


def sized(
    n: int, x: Float[Tensor, "2 {n}"], m: Int[Tensor, "#b {n}+1"] | None = None, result=None
) -> Shaped[Tensor, "b {n}"]:
    return result


def squares(k: int, x: Float[Tensor, "{k}**2"]):  # noqa: F821 (a jaxtyping dimension)
    """jaxtyping writes k into the annotation and evaluates the text: k=-3 gives -3**2 = -9, never a size."""


FUNCTIONS = {
    "attend": Net.attend,
    "heads_of": Net.heads_of,
    "batched": batched,
    "split": split,
    "step": step,
    "either": either,
    "scalars": scalars,
    "sized": sized,
    "squares": squares,
}
FAST = {
    name: compile_checker(fn, resolved_signature(fn), lambda a, k: REFUSED_ARGUMENTS, lambda a, k, out: REFUSED_RETURN)
    for name, fn in FUNCTIONS.items()
}
JAXTYPING = {name: jaxtyped(fn, typechecker=beartype) for name, fn in FUNCTIONS.items()}

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
OTHERS = (torch.int64, torch.int32, torch.uint8, torch.bool, torch.complex64)


class Draw:
    """Random values near a valid call: each size, dtype, rank or type is wrong now and then."""

    def __init__(self, rng, p):
        self.rng, self.p = rng, p

    def wrong(self):
        return self.rng.random() < self.p

    def size(self, n):
        return self.rng.choice([1, n + 1, max(n - 1, 0), 2 * n]) if self.wrong() else n

    def tensor(self, shape, kind="f"):
        shape = [self.size(n) for n in shape]
        if self.wrong():
            shape = shape[1:] if shape and self.rng.random() < 0.5 else [self.rng.choice([1, 2])] + shape
        good = {"f": FLOATS, "i": (torch.int64, torch.int32, torch.uint8), "b": (torch.bool,), "s": FLOATS + OTHERS}[
            kind
        ]
        dtype = self.rng.choice(OTHERS + FLOATS if self.wrong() else good)
        return torch.zeros(shape, dtype=dtype)

    def value(self, good, *bad):
        return self.rng.choice(bad) if bad and self.wrong() else good


def _call(name, draw, rng):
    """(args, kwargs) of a random call of FUNCTIONS[name]: arguments by position or by keyword, defaults sometimes
    left out, and a result of the right or a wrong shape."""
    b, s, k, n, h = (rng.choice([1, 2, 3]) for _ in range(5))
    d = h * rng.choice([1, 2])
    if name == "attend":
        net = Net(d_model=4, heads=2)
        mask = draw.value(
            draw.tensor([rng.choice([1, b]), rng.choice([1, s]), k], "b"),
            None,
            AttentionMask(causal=True),
            torch.ones(b, s, k),
            "mask",
        )
        named = {"x": draw.tensor([b, s, draw.value(4, 3)]), "mask": mask, "result": draw.tensor([b, s, 4])}
        if rng.random() < 0.5:
            named["cache"] = draw.value(None, KVCache(), 3)
        if rng.random() < 0.5:
            named["scale"] = draw.value(draw.value(0.5, None), 1, True, "x")
        if rng.random() < 0.3:
            named["steps"] = draw.value(3, 2.0, None)
        if rng.random() < 0.3:  # its default, None, breaks its annotation: beartype checks only what is given
            named["limit"] = draw.value(8, None)
        return [net], named
    if name == "heads_of":
        # a field that is not an int: jaxtyping formats it into the annotation and evaluates the text
        net = Net(d_model=draw.value(d, d + 1), heads=rng.choice([h, h, h, 0]))
        batch = [rng.choice([1, 2]) for _ in range(rng.randrange(3))]
        net.result = draw.tensor([*batch, h, d // max(h, 1)])
        return [net], {"x": draw.tensor([*batch, d])}
    if name == "batched":
        batch = [rng.choice([1, 2, 3]) for _ in range(rng.randrange(3))]
        # '*#batch' broadcasts against '*batch': a 1 anywhere in either, or a size that breaks it
        other = [rng.choice([x, x, 1, 2, 3]) for x in batch][rng.randrange(2) :]
        return [], {
            "x": draw.tensor([*batch, n]),
            "y": draw.tensor([*other, n]),
            "z": draw.tensor([*batch[:1], 3], "s"),
            "result": draw.tensor([*batch, n]),
        }
    if name == "split":
        result = draw.value(
            (draw.tensor([b, h, d // h]), draw.tensor([b], "i")), None, [1, 2], (draw.tensor([b, h, d // h]),)
        )
        return [], {
            "x": draw.tensor([b, d]),
            "y": draw.tensor([b, h, draw.value(d // h, d // h + 1)]),
            "k": draw.tensor([b, s], "i"),
            "flag": draw.value(True, 1, None),
            "result": result,
        }
    if name == "step":
        return [], {
            "ys": draw.tensor([b, s], "i"),
            "scores": draw.tensor([b, s + 1]),
            "fn": draw.value(torch.relu, 3, None),
            "result": draw.tensor([b, s + 1], "i"),
        }
    if name == "either":
        c = rng.choice([2, 3])
        # (c, b, n) first binds b=c, n=b in the first alternative, which then fails: jaxtyping undoes those
        x = draw.tensor([b, n, 2]) if rng.random() < 0.3 else draw.tensor([c, b, n])
        return [], {"x": x, "y": draw.tensor([n, c]), "result": draw.value(draw.tensor([b, n]), None, 0)}
    if name == "scalars":
        return [], {
            "x": draw.tensor([]),
            "w": draw.tensor([rng.choice([2, 3]), 1, d]),
            "v": draw.tensor([*([b] * rng.randrange(3)), 2], "b"),
            "n": draw.value(3, 3.0, False),
            "result": draw.tensor([d]),
        }
    if name == "squares":
        k = rng.choice([-3, -2, 2, 3])
        return [], {"k": k, "x": draw.tensor([k * k])}
    named = {"n": draw.value(n, float(n), -1), "x": draw.tensor([2, n]), "result": draw.tensor([b, n], "s")}
    if rng.random() < 0.5:
        named["m"] = draw.value(draw.tensor([rng.choice([1, b]), n + 1], "i"), None)
    return [], named


def _spread(fn, positional, named, rng):
    """Move a random prefix of the named arguments into positional ones (as far as the signature allows)."""
    args, kwargs = list(positional), dict(named)
    for p in list(inspect.signature(fn).parameters.values())[len(args) :]:
        if p.kind != p.POSITIONAL_OR_KEYWORD or p.name not in kwargs or rng.random() < 0.3:
            break
        args.append(kwargs.pop(p.name))
    return tuple(args), kwargs


def _jaxtyping_accepts(name, args, kwargs):
    try:
        JAXTYPING[name](*args, **kwargs)
    except Exception:  # TypeCheckError, AnnotationError, bind's TypeError: refused
        return False
    return True


def test_the_fast_path_decides_every_call_as_jaxtyping_does():
    rng = random.Random(2211)
    seen = {name: [0, 0] for name in FUNCTIONS}
    disagreements = []
    for trial in range(1200):
        name = rng.choice(sorted(FUNCTIONS))
        draw = Draw(rng, p=rng.choice([0.0, 0.05, 0.15]))
        args, kwargs = _spread(FUNCTIONS[name], *_call(name, draw, rng), rng)
        fast = FAST[name](args, kwargs)
        fast_accepts = fast is not REFUSED_ARGUMENTS and fast is not REFUSED_RETURN
        accepted = _jaxtyping_accepts(name, args, kwargs)
        seen[name][accepted] += 1
        if fast_accepts != accepted:
            disagreements.append((trial, name, args, kwargs, fast_accepts))
    assert not disagreements, disagreements[:3]
    # the data reached both decisions for every function
    assert all(refused > 25 and valid > 20 for refused, valid in seen.values()), seen


@pytest.mark.parametrize("field", [2.0, torch.tensor(2), "2"], ids=["float", "0-dim tensor", "str"])
def test_a_field_that_is_not_a_number_is_left_to_jaxtyping(field):
    """jaxtyping formats a field into the annotation and evaluates the text ('{self.heads}' -> '1+1' -> 2); the fast
    path reads ints only and hands anything else to jaxtyping, which then decides (here: valid)."""
    net, misses = Net(d_model=4, heads=field), []
    net.result = torch.zeros(2, 2)
    fast = FAST["heads_of"]((net, torch.zeros(4)), {})
    assert fast is REFUSED_RETURN and _jaxtyping_accepts("heads_of", (net, torch.zeros(4)), {})
    checked_heads = checked(Net.heads_of)
    from transformer.contracts import decorator

    decorator._on_fast_path_miss = lambda qualname, part: misses.append((qualname, part))
    try:
        assert checked_heads(net, torch.zeros(4)) is net.result  # jaxtyping's decision: valid
    finally:
        decorator._on_fast_path_miss = None
    assert misses == [("Net.heads_of", "return")]


def test_a_refused_return_value_is_refused_as_the_return_and_the_function_runs_once():
    calls = []

    @checked
    def shrink(x: Float[Tensor, "b n"], keep: int = 1) -> Float[Tensor, "b n"]:
        calls.append(keep)
        return x[:, :keep]

    with pytest.raises(TypeCheckError) as info:
        shrink(torch.randn(2, 3), keep=2)
    assert calls == [2]  # jaxtyping's report of the return value did not call the function again
    first, *rest = str(info.value).splitlines()
    assert first.endswith("shrink: the return value is f32[2,2], expected Float[Tensor, 'b n'] with b=2, n=3")
    assert rest[0].startswith("Type-check error whilst checking the return value of ")


def test_the_report_is_jaxtyping_s_own():
    """The lines after the summary are jaxtyping's report of the same call, as before the fast path."""
    norm = T.LayerNorm(16)
    with pytest.raises(TypeCheckError) as info:
        norm(torch.randn(2, 5, 8))
    summary, *report = str(info.value).splitlines()
    with pytest.raises(TypeCheckError) as direct:
        jaxtyped(T.LayerNorm.forward.__wrapped__, typechecker=beartype)(norm, torch.randn(2, 5, 8))
    assert report == str(direct.value).splitlines()
    assert summary == (
        "LayerNorm.forward: argument 'x' is f32[2,5,8], expected Float[Tensor, '*batch {self.features}'] "
        "(self.features=16)"
    )


def test_every_contract_of_the_package_but_one_has_the_fast_path():
    from test_contracts_vocabulary import _checked_functions

    slow = {name: fn._fast_checker()[1] for name, fn in _checked_wrappers() if fn._fast_checker()[1]}
    assert len(list(_checked_functions())) > 30
    # beartype checks one random item of a Sequence[...]: only jaxtyping can decide those exactly (generate's
    # end_symbols: Sequence[int] and stop_sequences: Sequence[Sequence[int]]; the first one met is named)
    assert slow == {"transformer.lm.generation.generate": "the annotation collections.abc.Sequence[int]"}


def _checked_wrappers():
    from test_contracts_vocabulary import package_modules

    for module in package_modules():
        for _, obj in inspect.getmembers(module):
            for fn in [getattr(obj, n, None) for n in vars(obj)] if inspect.isclass(obj) else [obj]:
                if hasattr(fn, "_fast_checker") and fn.__module__ == module.__name__:
                    yield f"{module.__name__}.{fn.__qualname__}", fn


def test_annotations_the_fast_path_does_not_replicate_are_left_to_jaxtyping():
    from collections.abc import Sequence

    def f(x: Float[Tensor, "n"], ids: Sequence[int]) -> Float[Tensor, "n"]:  # noqa: F821 (a jaxtyping dimension)
        return x

    with pytest.raises(NotFast, match="Sequence"):
        compile_checker(f, resolved_signature(f), None, None)
    g = checked(f)
    assert g._fast_checker()[0] is g._jaxtyping
    assert g(torch.zeros(3), [1, 2]).shape == (3,)
    with pytest.raises(TypeCheckError, match=r"argument 'x' is f32\[2,3\]"):
        g(torch.zeros(2, 3), [1])


def _decisions(fn, calls):
    """For each (args, result) call: (checked accepts, jaxtyping + beartype accept)."""

    def with_result(result):
        def call(*args):
            return result

        call.__signature__ = inspect.signature(fn)
        call.__annotations__ = fn.__annotations__
        call.__name__ = call.__qualname__ = fn.__name__
        return call

    out = []
    for args, result in calls:
        decided = []
        for wrap in (checked, lambda f: jaxtyped(typechecker=beartype)(f)):
            try:
                wrap(with_result(result))(*args)
            except TypeCheckError:
                decided.append(False)
            else:
                decided.append(True)
        out.append(tuple(decided))
    return out


def test_variadic_axes_between_fixed_ones_need_the_fixed_rank_at_least():
    """'a *b c' takes rank 2 and up (*b may be empty); rank 0 and 1 are refused, as jaxtyping refuses them."""

    def f(x: Float[Tensor, "a *b c"]) -> None: ...

    shapes = [(), (5,), (2, 3), (2, 3, 4), (2, 3, 4, 5)]
    decisions = _decisions(f, [((torch.zeros(s),), None) for s in shapes])
    assert decisions == [(False, False), (False, False), (True, True), (True, True), (True, True)]


def test_a_fixed_length_tuple_takes_exactly_its_length():
    def f(x: Float[Tensor, "a"]) -> tuple[Float[Tensor, "a"], Float[Tensor, "a"]]: ...  # noqa: F821 (a jaxtyping dimension)

    x = torch.zeros(3)
    decisions = _decisions(f, [((x,), (x,) * n) for n in (1, 2, 3)])
    assert decisions == [(False, False), (True, True), (False, False)]
