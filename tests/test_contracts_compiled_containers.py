"""Issue 31: every container form the contract grammar accepts is decided the same eagerly and under torch.compile.

Fixed-length tuples (too long and too short, as an argument and as a return value), variable-length tuples, lists,
dicts (keys and values) and ``Optional``/``Union`` around them: the compiled call (fullgraph=True) accepts what the
eager call accepts and refuses what it refuses, with eager mode's first line. Before, ``tuple[X, ...]``, ``list[X]``
and ``dict[K, V]`` were not checked at all under compile (a list passed for a tuple, a dict with int keys for
``dict[str, ...]``). The cases are built so that beartype's one sampled item decides as the whole container does
(every item fits, or every item breaks the contract): where only some items break it, eager mode's answer depends on
the item beartype samples, and the compiled checker, which reads every item, refuses (docs/contracts.md)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from transformer import Float, Tensor, TypeCheckError, checked
from transformer.contracts import CompiledContractError


@checked
def pair_in(x: tuple[Float[Tensor, "b n"], Float[Tensor, "b n"]]) -> Float[Tensor, "b n"]:
    return x[0] + x[-1]


@checked
def pair_out(x: Float[Tensor, "b n"], k: int) -> tuple[Float[Tensor, "b n"], Float[Tensor, "b n"]]:
    return tuple(x * i for i in range(k))


@checked
def any_length(x: Float[Tensor, "b n"], rest: tuple[Float[Tensor, "b n"], ...]) -> Float[Tensor, "b n"]:
    return x if not rest else x + rest[-1]


@checked
def listed(x: Float[Tensor, "b n"], rest: list[Float[Tensor, "b n"]]) -> Float[Tensor, "b n"]:
    return x if not rest else x + rest[-1]


@checked
def keyed(x: Float[Tensor, "b n"], named: dict[str, Float[Tensor, "b n"]]) -> Float[Tensor, "b n"]:
    return x if not named else x + list(named.values())[-1]


@checked
def maybe(x: Float[Tensor, "b n"], rest: tuple[Float[Tensor, "b n"], ...] | None = None) -> Float[Tensor, "b n"]:
    return x if not rest else x + rest[-1]


@checked
def either(x: Float[Tensor, "b n"], rest: list[Float[Tensor, "b n"]] | tuple[int, int]) -> Float[Tensor, "b n"]:
    return x if isinstance(rest, tuple) or not rest else x + rest[-1]


@checked
def ids(counts: tuple[int, ...], table: dict[int, str]) -> int:
    return len(counts) + len(table)


A, W = torch.randn(2, 3), torch.randn(4, 3)  # W: the wrong batch for "b" once x bound it to 2

CASES = {  # name: (function, arguments, whether the contract holds)
    "fixed tuple, exact": (pair_in, ((A, A),), True),
    "fixed tuple, one item too many": (pair_in, ((A, A, A),), False),
    "fixed tuple, one item too few": (pair_in, ((A,),), False),
    "fixed tuple, empty": (pair_in, ((),), False),
    "fixed tuple, a list": (pair_in, ([A, A],), False),
    "fixed tuple return, exact": (pair_out, (A, 2), True),
    "fixed tuple return, one item too many": (pair_out, (A, 3), False),
    "fixed tuple return, one item too few": (pair_out, (A, 1), False),
    "variadic tuple, empty": (any_length, (A, ()), True),
    "variadic tuple, one": (any_length, (A, (A,)), True),
    "variadic tuple, three": (any_length, (A, (A, A, A)), True),
    "variadic tuple, wrong sizes": (any_length, (A, (W, W)), False),
    "variadic tuple, a list": (any_length, (A, [A, A]), False),
    "variadic tuple, not tensors": (any_length, (A, (1, 2)), False),
    "list, empty": (listed, (A, []), True),
    "list, two": (listed, (A, [A, A]), True),
    "list, wrong sizes": (listed, (A, [W]), False),
    "list, a tuple": (listed, (A, (A, A)), False),
    "dict, empty": (keyed, (A, {}), True),
    "dict, two": (keyed, (A, {"a": A, "b": A}), True),
    "dict, int keys": (keyed, (A, {1: A, 2: A}), False),
    "dict, wrong sizes": (keyed, (A, {"a": W}), False),
    "dict, a list": (keyed, (A, [A]), False),
    "optional variadic tuple, None": (maybe, (A, None), True),
    "optional variadic tuple, two": (maybe, (A, (A, A)), True),
    "optional variadic tuple, a list": (maybe, (A, [A]), False),
    "union, the list": (either, (A, [A]), True),
    "union, the pair": (either, (A, (1, 2)), True),
    "union, a pair of three": (either, (A, (1, 2, 3)), False),
    "union, a list of ints": (either, (A, [1]), False),
    "plain values, exact": (ids, ((1, 2), {3: "c"}), True),
    "plain values, strs in an int tuple": (ids, (("1", "2"), {3: "c"}), False),
    "plain values, int value for str": (ids, ((1, 2), {3: 4}), False),
}


def _outcome(call) -> str | None:
    """None when ``call()`` passes its contract, else the first line of the TypeCheckError."""
    try:
        call()
    except TypeCheckError as error:
        return str(error).splitlines()[0]
    return None


@pytest.mark.parametrize("case", CASES)
def test_each_container_form_is_decided_compiled_as_eagerly(case):
    fn, args, holds = CASES[case]
    eager = _outcome(lambda: fn(*args))
    assert (eager is None) == holds, f"eager mode decides {case!r} as beartype does: {eager}"
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    if holds:
        got, want = compiled(*args), fn(*args)
        if isinstance(want, int):
            assert got == want
        else:
            torch.testing.assert_close(got, want)
        assert counter.frame_count <= 1  # no graph break (none at all where the function does no tensor work)
        return
    with pytest.raises(CompiledContractError) as info:
        compiled(*args)
    assert str(info.value).splitlines()[0] == eager


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_valid_container_call_compiles_to_one_graph_and_a_wrong_length_is_refused(dynamic):
    """The tuple of issue 31 (zip would cut the longer side): a valid graph serves valid calls; the same function
    given one item more raises eager mode's first line while it is traced, static and dynamic shapes alike."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(pair_in, fullgraph=True, backend=counter, dynamic=dynamic)
    x = torch.randn(3, 5)
    torch.testing.assert_close(compiled((x, x)), pair_in((x, x)))
    assert counter.frame_count == 1
    eager = _outcome(lambda: pair_in((x, x, x)))
    assert eager is not None and eager.startswith("pair_in: argument 'x' is (f32[3,5](torch), f32[3,5](torch), f32")
    with pytest.raises(CompiledContractError) as info:
        compiled((x, x, x))
    assert str(info.value).splitlines()[0] == eager
