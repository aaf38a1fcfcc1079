"""Issue 30, section 2: a compiled call that breaks its contract raises eager mode's TypeCheckError (the same first
line) for every annotation form, even where the code after the violated call would fail on a tensor of the wrong
shape first. Each case is compiled with fullgraph=True: the valid call matches eager in one graph, the wrong call
raises ``CompiledContractError`` while it is traced. Before, a violation returned a stand-in tensor whose unbound
sizes were 1, and the operation after it failed first with Dynamo's TorchRuntimeError (the ``after`` of each case
is such an operation), or, for ``Literal``, nothing was checked at all."""

import logging
from typing import Literal

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

from transformer import Bool, Float, Int, Tensor, TypeCheckError, checked
from transformer.contracts import CompiledContractError

COMPILED_NOTE = "(raised while torch.compile traced this call"


@checked
def fixed(x: Float[Tensor, "b 3"]) -> Float[Tensor, "b 3"]:
    return x * 2


@checked
def named(x: Float[Tensor, "b n"], y: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
    return x + y


class SplitHeads(nn.Module):
    """The reproduction of issue 30: a checked helper that declares {self.n_head}, fed q with heads and head_dim
    swapped; the caller reshapes its result back to (batch, seq, n_embd)."""

    n_head = 4

    @checked
    def forward(
        self, q: Float[Tensor, "batch seq {self.n_head} head_dim"]
    ) -> Float[Tensor, "batch {self.n_head} seq head_dim"]:
        return q.transpose(1, 2)


@checked
def broadcast(x: Float[Tensor, "b n"], keep: Bool[Tensor, "#b n"]) -> Float[Tensor, "b n"]:
    return x * keep


@checked
def variadic(x: Float[Tensor, "*batch n"], y: Float[Tensor, "*batch n"]) -> Float[Tensor, "*batch n"]:
    return x + y


@checked
def shifted(x: Float[Tensor, "b n"], y: Float[Tensor, "b n+1"]) -> Float[Tensor, "b n"]:
    return x + y[:, 1:]


@checked
def reduce(x: Float[Tensor, "b n"], how: Literal["sum", "mean"]) -> Float[Tensor, " b"]:
    return x.sum(-1) if how == "sum" else x.mean(-1)


@checked
def embed(ids: Int[Tensor, "b n"], table: Float[Tensor, "vocab d"]) -> Float[Tensor, "b n d"]:
    return table[ids]


@checked
def masked(x: Float[Tensor, "b n"], keep: Bool[Tensor, "b n"] | None = None) -> Float[Tensor, "b n"]:
    return x if keep is None else x * keep


@checked
def pair(x: Float[Tensor, "b n"]) -> tuple[Float[Tensor, "b n"], Float[Tensor, " b"]]:
    return x, x.sum(0)  # the bug: sums over the batch, so the second result has n entries, not b


F = torch.randn
CASES = {  # name: (function, valid arguments, wrong arguments, what the caller does next with the result)
    "a fixed size": (fixed, (F(2, 3),), (F(2, 5),), lambda out, a: out.reshape(a[0].shape)),
    "a name bound by an earlier argument": (
        named,
        (F(2, 3), F(2, 3)),
        (F(2, 3), F(2, 4)),
        lambda out, a: out.reshape(a[1].shape),
    ),
    "{self.x}": (
        SplitHeads(),
        (F(2, 8, 4, 16),),
        (F(2, 8, 16, 4),),  # heads and head_dim swapped
        lambda out, a: out.transpose(1, 2).reshape(2, 8, 64),
    ),
    "# broadcast": (
        broadcast,
        (F(2, 3), torch.ones(1, 3, dtype=torch.bool)),
        (F(2, 3), torch.ones(3, 3, dtype=torch.bool)),
        lambda out, a: out * a[1],
    ),
    "*batch": (variadic, (F(2, 3, 4), F(2, 3, 4)), (F(2, 3, 4), F(2, 5, 4)), lambda out, a: out.reshape(a[1].shape)),
    "an expression": (
        shifted,
        (F(2, 3), F(2, 4)),
        (F(2, 3), F(2, 3)),
        lambda out, a: out.reshape(2, a[1].shape[1] - 1),
    ),
    "a literal": (reduce, (F(2, 3), "sum"), (F(2, 3), "max"), lambda out, a: out * 1),
    "a dtype kind": (
        embed,
        (torch.tensor([[0, 1]]), F(3, 4)),
        (torch.tensor([[0.0, 1.0]]), F(3, 4)),
        lambda out, a: out.reshape(a[0].shape + (4,)),
    ),
    "optional": (
        masked,
        (F(2, 3), torch.ones(2, 3, dtype=torch.bool)),
        (F(2, 3), torch.ones(2, 5, dtype=torch.bool)),
        lambda out, a: out.reshape(a[1].shape),
    ),
    "a tuple return": (pair, (F(3, 3),), (F(2, 3),), lambda out, a: out[1].reshape(a[0].shape[1])),
}


def _first_line(call, kind):
    with pytest.raises(TypeCheckError) as info:
        call()
    assert type(info.value) is kind
    return str(info.value).splitlines()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_compiled_violation_reads_as_eager_for_each_annotation_form(case, dynamic):
    fn, valid, wrong, after = CASES[case]

    def caller(*args):
        return after(fn(*args), args)

    eager = _first_line(lambda: caller(*wrong), TypeCheckError)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(caller, fullgraph=True, backend=counter, dynamic=dynamic)
    torch.testing.assert_close(compiled(*valid), caller(*valid))
    assert counter.frame_count == 1
    got = _first_line(lambda: compiled(*wrong), CompiledContractError)
    assert got[0] == eager[0]
    assert got[1].startswith(COMPILED_NOTE)
    torch.testing.assert_close(compiled(*valid), caller(*valid))  # the valid graph still serves valid calls
    assert counter.frame_count == 1


def test_the_issue_reproduction_names_head_dim():
    """The first line the user gets, compiled as eagerly, for the swapped-heads tensor of issue 30."""
    fn, _, wrong, after = CASES["{self.x}"]
    torch._dynamo.reset()
    compiled = torch.compile(lambda q: after(fn(q), (q,)), fullgraph=True, backend="aot_eager")
    assert _first_line(lambda: compiled(*wrong), CompiledContractError)[0] == (
        "SplitHeads.forward: argument 'q' is f32[2,8,16,4], expected Float[Tensor, 'batch seq {self.n_head} "
        "head_dim'] (self.n_head=4) with batch=2, seq=8"
    )


def test_a_violation_raised_while_tracing_logs_nothing():
    """torch's fake-tensor mode logs every TypeError a fake implementation raises, traceback and all; not ours."""
    fn, _, wrong, after = CASES["a fixed size"]
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: after(fn(x), (x,)), fullgraph=True, backend="aot_eager")
    logger, records = logging.getLogger("torch._subclasses.fake_tensor"), []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # (torch's loggers do not propagate to pytest's caplog)
    logger.addHandler(handler)
    try:
        _first_line(lambda: compiled(*wrong), CompiledContractError)
    finally:
        logger.removeHandler(handler)
    assert [record.getMessage() for record in records] == []


@checked
def mixed(x: Float[Tensor, "b n"], mode: Literal[1, "a"], tag: Literal[2]) -> Float[Tensor, "b n"]:
    return x * 2 if mode == 1 else x + tag


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        ((1, 2), True),
        (("a", 2), True),  # the second value of a mixed Literal: its own class (str), not the first one's
        ((1.0, 2), False),  # equal to 1 but not an int: beartype refuses it eagerly
        (("a", 2.0), False),
    ],
)
def test_a_literal_is_matched_by_value_and_class_compiled_as_eagerly(args, ok):
    x = torch.randn(2, 3)
    torch._dynamo.reset()
    compiled = torch.compile(mixed, fullgraph=True, backend="aot_eager")
    if ok:
        torch.testing.assert_close(compiled(x, *args), mixed(x, *args))
        return
    eager = _first_line(lambda: mixed(x, *args), TypeCheckError)
    assert _first_line(lambda: compiled(x, *args), CompiledContractError)[0] == eager[0]
