"""``transformer.check`` (transformer/contracts/within.py): a contract on a tensor inside a checked function, bound to
the call's dimension names; eagerly and under torch.compile(fullgraph=True), with the same first line."""

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import transformer as tt
from transformer import Float, Shaped, Tensor, TypeCheckError, check, checked
from transformer.contracts import CompiledContractError

COMPILED_NOTE = "(raised while torch.compile traced this call"


class CausalSelfAttention(nn.Module):
    """nanoGPT's q/k/v split, with the two bugs of issue 30: heads and head_dim swapped, or the transpose forgotten."""

    def __init__(self, n_embd=64, n_head=4, bug=None):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.n_embd, self.n_head, self.bug = n_embd, n_head, bug

    @checked
    def forward(self, x: Float[Tensor, "batch seq {self.n_embd}"]) -> Float[Tensor, "batch seq {self.n_embd}"]:
        B, T, C = x.size()
        q, k, v = (self.heads(t, B, T, C) for t in self.c_attn(x).split(self.n_embd, dim=2))
        check(q, "batch {self.n_head} seq head_dim")
        check(k, "batch {self.n_head} seq head_dim")
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).contiguous().view(B, T, C)

    def heads(self, t, B, T, C):
        if self.bug == "swapped":
            return t.view(B, T, C // self.n_head, self.n_head).transpose(1, 2)
        if self.bug == "no transpose":
            return t.view(B, T, self.n_head, C // self.n_head)
        return t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)


def _lines(call, kind=TypeCheckError):
    with pytest.raises(TypeCheckError) as info:
        call()
    assert type(info.value) is kind
    return str(info.value).splitlines()


X = torch.randn(2, 8, 64)


@pytest.mark.parametrize(
    ("bug", "line"),
    [
        (
            "swapped",
            "CausalSelfAttention.forward: tensor 'q' is f32[2,16,8,4], expected 'batch {self.n_head} seq head_dim' "
            "(self.n_head=4) with batch=2, seq=8; axis 1 ({self.n_head}) is 16, expected 4",
        ),
        (
            "no transpose",
            "CausalSelfAttention.forward: tensor 'q' is f32[2,8,4,16], expected 'batch {self.n_head} seq head_dim' "
            "(self.n_head=4) with batch=2, seq=8; axis 1 ({self.n_head}) is 8, expected 4",
        ),
    ],
)
def test_the_nanogpt_bugs_are_named_eagerly_and_compiled(bug, line):
    """Every shape at the module's boundary is right; only the check inside sees the bug, and names tensor and axis."""
    model = CausalSelfAttention(bug=bug)
    with tt.checks(False):
        assert model(X).shape == X.shape  # unchecked, the bug trains silently
    assert _lines(lambda: model(X)) == [line]
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = _lines(lambda: compiled(X), CompiledContractError)
    assert got[0] == line
    assert got[1].startswith(COMPILED_NOTE)


def test_a_valid_forward_with_checks_compiles_to_one_graph_and_matches_eager():
    model = CausalSelfAttention()
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter)
    torch.testing.assert_close(compiled(X), model(X))
    assert counter.frame_count == 1  # no graph break
    for dynamic in (True, None):  # dynamic sizes: the check's comparisons are guards, the message has the call's sizes
        torch._dynamo.reset()
        swapped = CausalSelfAttention(bug="swapped")
        compiled = torch.compile(swapped, fullgraph=True, backend="aot_eager", dynamic=dynamic)
        for b, t in ((2, 8), (3, 5)):
            got = _lines(lambda b=b, t=t, c=compiled: c(torch.randn(b, t, 64)), CompiledContractError)[0]
            assert f"is f32[{b},16,{t},4]" in got and f"with batch={b}, seq={t};" in got


class Shapes(nn.Module):
    """One checked forward whose body checks ``inner`` (a tensor built from x) against ``dims``."""

    def __init__(self, dims, make, width=3):
        super().__init__()
        self.dims, self.make, self.width = dims, make, width

    @checked
    def forward(self, x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        check(self.make(x), self.dims, name="inner")
        return x


CASES = {  # dims, the tensor checked (from x of shape (2, 3)), the expected end of the first line or None (valid)
    "a name of the signature": ("b k", lambda x: x.new_zeros(3, 5), "; axis 0 (b) is 3, expected 2"),
    "a field": ("b {self.width}", lambda x: x.new_zeros(2, 4), "; axis 1 ({self.width}) is 4, expected 3"),
    "a fixed size": ("b 7", lambda x: x.new_zeros(2, 6), "; axis 1 (7) is 6, expected 7"),
    "an expression": ("b n+1", lambda x: x.new_zeros(2, 3), "; axis 1 (n+1) is 3, expected 4"),
    "the rank": ("b n k", lambda x: x.new_zeros(2, 3), "; it has 2 axes, expected 3"),
    "# broadcasts 1": ("#b n", lambda x: x.new_zeros(1, 3), None),
    "# does not broadcast 3": ("#b n", lambda x: x.new_zeros(3, 3), "; axis 0 (#b) is 3, expected 2"),
    "*batch": ("*batch b n", lambda x: x.new_zeros(4, 5, 2, 4), "; axis 3 (n) is 4, expected 3"),
    "... and _": ("... _ n", lambda x: x.new_zeros(9, 9, 3), None),
}


@pytest.mark.parametrize("case", CASES)
def test_each_dimension_form_in_a_check_eagerly_and_compiled(case):
    dims, make, end = CASES[case]
    module = Shapes(dims, make)
    x = torch.randn(2, 3)
    if end is None:
        assert module(x) is x
        return
    (line,) = _lines(lambda: module(x))
    assert line.startswith("Shapes.forward: tensor 'inner' is f32[") and line.endswith(end), line
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    assert _lines(lambda: compiled(x), CompiledContractError)[0] == line


def test_a_dtype_kind_and_optional_annotation():
    ints = Shapes(Float[Tensor, "b n"], lambda x: x.long())
    (line,) = _lines(lambda: ints(torch.randn(2, 3)))
    assert line == (
        "Shapes.forward: tensor 'inner' is i64[2,3], expected Float[Tensor, 'b n'] with b=2, n=3; "
        "its dtype int64 is not one the annotation allows"
    )
    torch._dynamo.reset()
    compiled = torch.compile(ints, fullgraph=True, backend="aot_eager")
    assert _lines(lambda: compiled(torch.randn(2, 3)), CompiledContractError)[0] == line
    optional = Float[Tensor, "b n"] | None
    assert Shapes(optional, lambda x: None)(torch.randn(2, 3)).shape == (2, 3)
    (line,) = _lines(lambda: Shapes(optional, lambda x: x[:1])(torch.randn(2, 3)))
    assert line.startswith("Shapes.forward: tensor 'inner' is f32[1,3], expected Float[Tensor, 'b n'] | None")


class Later(nn.Module):
    """A name first bound by a check holds for later checks and for the return value."""

    @checked
    def forward(self, x: Float[Tensor, "b n"], w: Float[Tensor, "k n"]) -> Float[Tensor, "b m"]:
        h = x @ w.T
        check(h, "b m")  # binds m (= k)
        check(w[:, :1], "m 1")
        return h[:, :-1]  # the bug: the return value is checked against the m the check bound


def test_a_name_a_check_binds_holds_for_later_checks_and_the_return_value():
    x, w = torch.randn(2, 3), torch.randn(5, 3)
    line = "Later.forward: the return value is f32[2,4], expected Float[Tensor, 'b m'] with b=2, n=3, k=5, m=5"
    assert _lines(lambda: Later()(x, w)) == [line]
    torch._dynamo.reset()
    compiled = torch.compile(Later(), fullgraph=True, backend="aot_eager")
    assert _lines(lambda: compiled(x, w), CompiledContractError)[0] == line
    with tt.checks(False):
        assert Later()(x, w).shape == (2, 4)


class Inner(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        check(x.T, "b n")
        return x


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    @checked
    def forward(self, x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        y = self.inner(x)
        check(
            y,  # a call spread over lines: its source cannot be read from one line
            "b 9",
        )
        return y


def test_a_check_in_a_nested_call_names_its_callers_and_the_default_name_is_the_argument():
    line = "Outer.forward > Inner.forward: tensor 'x.T' is f32[3,2], expected 'b n' with b=2, n=3; axis 0 (b) is 3, "
    assert _lines(lambda: Outer()(torch.randn(2, 3))) == [line + "expected 2"]
    torch._dynamo.reset()
    compiled = torch.compile(Outer(), fullgraph=True, backend="aot_eager")
    assert _lines(lambda: compiled(torch.randn(2, 3)), CompiledContractError)[0] == line + "expected 2"
    (square,) = _lines(lambda: Outer()(torch.randn(3, 3)))
    assert square.startswith("Outer.forward: tensor 'the tensor checked at test_contracts_check.py:")


def test_outside_a_checked_call_check_refuses_and_with_checks_off_it_does_nothing():
    x = torch.randn(2, 3)
    (line,) = _lines(lambda: check(x, "b n"))
    assert line.startswith("check(..., 'b n') was called outside a @checked call")

    def unchecked(x):
        return check(x, "b n") * 2

    torch._dynamo.reset()
    got = _lines(lambda: torch.compile(unchecked, fullgraph=True, backend="aot_eager")(x), CompiledContractError)
    assert got[0] == line
    with tt.checks(False):
        assert check(x, "b n!") is x  # not even read: checks off cost one switch lookup
        assert check(x, Shaped[Tensor, "b"]) is x


def test_a_wrong_annotation_is_refused_by_name():
    with pytest.raises(ValueError, match=r"check: cannot read the annotation 'b \*\*n'"):
        Shapes("b **n", lambda x: x)(torch.randn(2, 3))
    with pytest.raises(TypeError, match="check: annotation must be a dimension string or a jaxtyping tensor"):
        Shapes(int, lambda x: x)(torch.randn(2, 3))


class Heads(nn.Module):
    def __init__(self, n_head):
        super().__init__()
        self.n_head, self.swapped = n_head, False

    @checked
    def forward(self, x: Float[Tensor, "batch seq width"]) -> Float[Tensor, "batch seq width"]:
        heads = (x.size(0), x.size(1), -1, self.n_head) if self.swapped else (x.size(0), x.size(1), self.n_head, -1)
        check(x.view(heads), "batch seq {self.n_head} head_dim", name="split")
        return x


class Block(nn.Module):
    """A checked call whose own ``n_head`` and ``seq`` differ from the inner call's: a check binds with the
    innermost checked call."""

    def __init__(self):
        super().__init__()
        self.n_head, self.inner = 3, Heads(2)

    @checked
    def forward(self, x: Float[Tensor, "batch seq width"]) -> Float[Tensor, "batch short width"]:
        return self.inner(x[:, :4])


def test_a_check_binds_with_the_innermost_checked_call():
    assert Block()(torch.randn(2, 6, 8)).shape == (2, 4, 8)  # the inner n_head 2 and seq 4, not the outer 3 and 6
    wrong = Block()
    wrong.inner.swapped = True
    (line,) = _lines(lambda: wrong(torch.randn(2, 6, 8)))
    assert line.startswith("Block.forward > Heads.forward: tensor 'split' is f32[2,4,4,2]")
    assert "(self.n_head=2)" in line and "seq=4" in line and line.endswith("axis 2 ({self.n_head}) is 4, expected 2")


def test_a_wrong_axis_of_size_one_is_named_in_the_message():
    @checked
    def f(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        check(x[:1], "b n", name="first row")
        return x

    (line,) = _lines(lambda: f(torch.randn(2, 5)))
    assert line.endswith(
        ".f: tensor 'first row' is f32[1,5], expected 'b n' with b=2, n=5; axis 0 (b) is 1, expected 2"
    )
