"""Contracts under torch.compile: a checked model compiles in one graph and matches eager, and a violation raises the
eager error (the same first line) while the call is traced, with static, dynamic and automatic shapes."""

import random
import threading

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import transformer as T
from transformer import TypeCheckError
from transformer.common.versions import TORCH_VERSION
from transformer.contracts import Bool, CompiledContractError, Float, Int, Shaped, Tensor, checked

BAD_X = torch.randn(2, 5, 8)  # wrong d_model for a 16-wide layer norm
BROADCASTS = torch.randn(2, 5, 1)  # breaks '*batch {self.features}' of a 16-wide layer norm, yet torch broadcasts it


def _compile_and_compare(model, backend):
    src = torch.randint(1, 11, (2, 7))
    tgt = torch.randint(1, 11, (2, 5))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    expected = model(*args)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(*args), expected, rtol=1e-5, atol=1e-5)
    # a second shape recompiles or reuses a dynamic graph, still without a false contract error
    src2 = torch.randint(1, 11, (3, 6))
    tgt2 = torch.randint(1, 11, (3, 4))
    args2 = (src2, tgt2, T.padding_mask(src2, 0), T.target_mask(tgt2, 0))
    torch.testing.assert_close(compiled(*args2), model(*args2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_compile_fullgraph_of_a_checked_model(placement):
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0, norm_placement=placement).eval()
    assert T.checks_enabled()
    _compile_and_compare(model, "aot_eager")


def test_compile_with_inductor_matches_eager():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0).eval()
    _compile_and_compare(model, "inductor")


def test_compiled_training_step_backward():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0)
    src = torch.randint(1, 11, (2, 7))
    tgt = torch.randint(1, 11, (2, 5))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    w = torch.randn(2, 5, 16)  # random weights: a plain sum of the final LayerNorm's output has almost no gradient
    (compiled(*args) * w).sum().backward()
    used = [p for p in model.parameters() if p.grad is not None]
    assert len(used) > 10
    grads = [p.grad.clone() for p in used]
    model.zero_grad()
    (model(*args) * w).sum().backward()
    for g, p in zip(grads, used, strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------------------------------------
# Under torch.compile, `checked` reads the same annotations with its own checker (Dynamo traces it into the graph's
# guards) and raises a violation through an operator whose fake version raises the eager error while tracing.


def _error_lines(call):
    """The lines of the TypeCheckError ``call`` raises (exactly that type, as eager raises)."""
    with pytest.raises(TypeCheckError) as info:
        call()
    assert type(info.value) in (TypeCheckError, CompiledContractError)  # eager's, or the same raised while tracing
    return str(info.value).splitlines()


COMPILED_NOTE = "(raised while torch.compile traced this call"


class _Widths:
    d = 4

    @checked
    def project(
        self, x: Float[Tensor, "b n {self.d}"], mask: Bool[Tensor, "#b #n n"] | None, keep: int = 4
    ) -> Float[Tensor, "b n {self.d}"]:
        return x[..., :keep]


@checked
def _batched(x: Float[Tensor, "*batch n"], y: Float[Tensor, "*#batch n"]) -> Float[Tensor, "*batch n"]:
    return x


@checked
def _step(ys: Int[Tensor, "b steps"], scores: Float[Tensor, "b steps+1"], grow: bool) -> Int[Tensor, "b steps+1"]:
    return torch.cat([ys, ys[:, :1]], 1) if grow else ys


@checked
def _pair(
    x: Float[Tensor, ""], v: Shaped[Tensor, "... 3"], trim: bool
) -> tuple[Float[Tensor, ""], Shaped[Tensor, "... 3"]]:
    return (x, v[..., :2]) if trim else (x, v)


@checked
def _sized(n: int, x: Float[Tensor, "2 {n}"], w: Float[Tensor, "_ #1 d"]) -> Float[Tensor, "d"]:  # noqa: F821 (a jaxtyping dimension)
    return w[0, 0]


@checked
def _either(x: Float[Tensor, "b n"] | Float[Tensor, "c b n"], y: Float[Tensor, "n c"]) -> Float[Tensor, "b n"]:
    return x if x.dim() == 2 else x[0]


def _random_call(rng):
    """A call of one of the functions above, on data that is right most of the time and wrong in one way or another
    (size, rank, dtype, broadcasting, a symbolic size, the return value) otherwise."""

    def tensor(shape, kind):
        wrong_dtype = rng.random() < 0.15
        dtype = {"f": (torch.float32, torch.int64), "b": (torch.bool, torch.float32), "i": (torch.int64, torch.float32)}
        return torch.zeros(shape, dtype=dtype[kind][wrong_dtype])

    def off(n, values=(1, 2, 3)):
        return rng.choice(values) if rng.random() < 0.2 else n

    which = rng.randrange(6)
    if which == 5:  # a union of two shapes: jaxtyping keeps what a failed alternative bound, not what the next binds
        b, n, c = rng.choice([2, 3]), rng.choice([2, 3]), rng.choice([2, 3])
        x = tensor((off(b), n) if rng.random() < 0.4 else (c, b, off(n)), "f")
        y = tensor((off(n), off(c)), "f")
        return lambda: _either(x, y)
    if which == 0:
        b, n = rng.choice([1, 2, 3]), rng.choice([1, 2, 3])
        x = tensor((b, n, off(4)), "f")
        mask = None if rng.random() < 0.2 else tensor((rng.choice([1, b, off(b)]), rng.choice([1, n]), off(n)), "b")
        keep = off(4, (2, 3))
        return lambda: _Widths().project(x, mask, keep=keep)
    if which == 1:
        batch = tuple(rng.choice([1, 2, 3]) for _ in range(rng.randrange(3)))
        other = tuple(off(d) if rng.random() < 0.5 else 1 for d in batch)[rng.randrange(2) :]
        n = rng.choice([2, 3])
        x, y = tensor((*batch, n), "f"), tensor((*other, off(n)), "f")
        return lambda: _batched(x, y)
    if which == 2:
        b, steps = rng.choice([2, 3]), rng.choice([1, 2])
        ys, scores, grow = tensor((b, steps), "i"), tensor((off(b), off(steps + 1)), "f"), rng.random() < 0.8
        return lambda: _step(ys, scores, grow)
    if which == 3:
        x = tensor(() if rng.random() < 0.8 else (1,), "f")
        v = tensor((*(rng.choice([1, 2]) for _ in range(rng.randrange(3))), off(3)), "f")
        trim = rng.random() < 0.2
        return lambda: _pair(x, v, trim)
    n = rng.choice([2, 3])
    x, w = tensor((off(2), off(n)), "f"), tensor((rng.choice([2, 3]), off(1), rng.choice([2, 3])), "f")
    return lambda: _sized(n, x, w)


def _first_line(call):
    try:
        call()
    except TypeCheckError as error:
        return str(error).splitlines()[0]
    return None


def test_compiled_checker_reads_every_annotation_as_jaxtyping_does(monkeypatch):
    """The checker used while compiling, run here in plain Python ('as if compiling', where its violation operator
    raises at once), gives the first line jaxtyping's eager check gives, on each of several hundred calls."""
    rng = random.Random(0)
    calls = [_random_call(rng) for _ in range(400)]
    eager = [_first_line(call) for call in calls]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    compiled_way = [_first_line(call) for call in calls]
    monkeypatch.undo()
    mismatches = [(e, c) for e, c in zip(eager, compiled_way, strict=True) if e != c]
    assert not mismatches, mismatches[:3]
    errors = [line for line in eager if line]
    # the data reached each kind of violation
    assert sum(line is None for line in eager) > 60
    assert sum("the return value is" in line for line in errors) > 10
    assert sum("torch.Size(" in line for line in errors) > 5  # '*batch' bound
    assert sum("expected Bool" in line for line in errors) > 10
    assert sum("is i64[" in line and "expected Float" in line for line in errors) > 10  # dtypes
    assert sum("steps=" in line for line in errors) > 5
    assert sum("_either: argument 'y'" in line for line in errors) > 5


def test_every_contract_of_the_package_is_read_by_the_compiled_checker():
    import inspect

    from test_contracts_vocabulary import package_modules  # every module, subpackages' too

    contracts = {}
    for module in package_modules():
        for _, obj in inspect.getmembers(module):
            candidates = [getattr(obj, n, None) for n in vars(obj)] if inspect.isclass(obj) else [obj]
            for fn in candidates:
                if hasattr(fn, "_contract") and fn.__module__ == module.__name__:
                    contracts[f"{module.__name__}.{fn.__qualname__}"] = fn._contract
    assert len(contracts) > 20
    assert {name: c.unsupported for name, c in contracts.items() if c.unsupported} == {}
    arrays = sum(repr(c.checks).count("'array'") + repr(c.result).count("'array'") for c in contracts.values())
    assert arrays > 60


def _decode_inputs(model, b, s, t, seed):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(1, 11, (b, s), generator=g), torch.randint(1, 11, (b, t), generator=g)
    with torch.no_grad():
        memory = model.encode(src, T.padding_mask(src, 0))
    return memory, T.padding_mask(src, 0), tgt, T.target_mask(tgt, 0)


WRONG_DECODE = {  # (memory, src_mask, tgt, tgt_mask) -> a wrong call of EncoderDecoder.decode
    "the target mask as source mask": lambda m, sm, t, tm: (m, tm, t, tm),
    "a memory of the wrong d_model": lambda m, sm, t, tm: (m[..., :8], sm, t, tm),
    "a float mask": lambda m, sm, t, tm: (m, sm.float(), t, tm),
    "an inconsistent batch": lambda m, sm, t, tm: (m, sm, t[:-1], tm[:-1]),
}


@pytest.mark.parametrize("shapes", ["static", "dynamic", "automatic"])
def test_compiled_decode_raises_the_eager_contract_error(shapes):
    """fullgraph=True, so one graph and no break; each wrong call raises jaxtyping's TypeCheckError with eager's first
    line while it is traced (no graph is made for it); with dynamic shapes the message has the sizes of the wrong call;
    valid calls afterwards still match eager."""
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0).eval()
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    dynamic = {"static": False, "dynamic": True, "automatic": None}[shapes]
    compiled = torch.compile(model.decode, fullgraph=True, backend=counter, dynamic=dynamic)
    with torch.no_grad():
        valid = _decode_inputs(model, 3, 7, 5, seed=0)
        torch.testing.assert_close(compiled(*valid), model.decode(*valid))
        if shapes == "automatic":  # a second size: Dynamo recompiles with dynamic sizes
            second = _decode_inputs(model, 4, 6, 3, seed=1)
            torch.testing.assert_close(compiled(*second), model.decode(*second))
        sizes = [(3, 7, 5)] if shapes == "static" else [(3, 7, 5), (5, 9, 6)]
        lines = {}
        for b, s, t in sizes:
            inputs = _decode_inputs(model, b, s, t, seed=2)
            for case, wrong in WRONG_DECODE.items():
                args = wrong(*inputs)
                eager = _error_lines(lambda args=args: model.decode(*args))
                frames = counter.frame_count
                got = _error_lines(lambda args=args: compiled(*args))
                assert got[0] == eager[0], case
                assert got[1].startswith(COMPILED_NOTE), case  # raised by the traced checker, not an eager fallback
                assert counter.frame_count == frames, case  # raised while tracing: no graph for a wrong call
                lines[b, case] = got[0]
        expected = (
            "EncoderDecoder.decode: argument 'src_mask' is bool[{b},{t},{t}], expected Bool[Tensor, '#batch "
            "#tgt_len src_len'] | transformer.masks.AttentionMask | None with batch={b}, src_len={s}, tgt_len={t}"
        )
        for b, s, t in sizes:  # with dynamic sizes, the sizes of the call being traced
            assert lines[b, "the target mask as source mask"] == expected.format(b=b, s=s, t=t)
        after = _decode_inputs(model, 2, 4, 3, seed=3)
        torch.testing.assert_close(compiled(*after), model.decode(*after))


def test_a_compiled_graph_follows_each_threads_switch():
    """The switch is part of the compiled graph's guards: a call under checks(False) runs the unchecked graph, a call
    in another thread (no block there: the default, on) raises, whichever ran first."""
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model.decode, fullgraph=True, backend="aot_eager")
    memory, src_mask, tgt, tgt_mask = _decode_inputs(model, 3, 7, 5, seed=0)
    args = (memory, src_mask, tgt, tgt_mask[:, :, :1])  # (batch, tgt_len, 1): torch broadcasts it, the contract not
    outcome = []

    def other_thread():
        with torch.no_grad():
            try:
                compiled(*args)
                outcome.append("ran")
            except TypeCheckError as error:
                outcome.append(str(error).splitlines()[0])

    with torch.no_grad():
        with T.checks(False):
            expected = model.decode(*args)
            torch.testing.assert_close(compiled(*args), expected)
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
            torch.testing.assert_close(compiled(*args), expected)  # still unchecked here
        assert outcome == [_error_lines(lambda: model.decode(*args))[0]]
        assert "argument 'tgt_mask' is bool[3,5,1]" in outcome[0]
        assert _error_lines(lambda: compiled(*args))[0] == outcome[0]  # and checked here, now outside the block


def test_a_checks_block_inside_a_compiled_function_governs_its_calls():
    norm = T.LayerNorm(16)

    def unchecked_inside(x):
        with T.checks(False):
            y = norm(x)
        return y * 2

    def checked_inside(x):
        with T.checks(True):
            return norm(x) * 2

    torch._dynamo.reset()
    quiet = torch.compile(unchecked_inside, fullgraph=True, backend="aot_eager")
    strict = torch.compile(checked_inside, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(quiet(BROADCASTS), unchecked_inside(BROADCASTS))  # checks on outside, off inside
    with T.checks(False):
        eager = _error_lines(lambda: checked_inside(BROADCASTS))[0]
        with pytest.raises(TypeError if TORCH_VERSION >= (2, 11) else Exception) as info:
            strict(BROADCASTS)
        if isinstance(info.value, CompiledContractError) and TORCH_VERSION != (2, 9):
            assert str(info.value).splitlines()[0] == eager  # torch 2.11 and later (2.10: not tried, either way)
        else:  # torch 2.9 (docs/install.md, "Supported versions"): Dynamo's own error, ours as its cause
            assert isinstance(info.value, torch._dynamo.exc.Unsupported), type(info.value)
            assert "GenericContextWrappingVariable" in str(info.value)
            assert type(info.value.__cause__) is CompiledContractError
            assert str(info.value.__cause__).splitlines()[0] == eager


def test_inductor_compiled_contract_error_reads_as_eager():
    generator = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, dropout=0.0).eval().generator
    torch._dynamo.reset()
    compiled = torch.compile(generator, fullgraph=True)  # the default backend, inductor
    x = torch.randn(2, 3, 8)  # d_model 8 into a 16-wide generator: a fake-tensor error, if the contract were skipped
    got, eager = _error_lines(lambda: compiled(x)), _error_lines(lambda: generator(x))
    assert (
        got[0]
        == eager[0]
        == (
            "Generator.forward: argument 'x' is f32[2,3,8], expected Float[Tensor, '*batch {self.d_model}'] "
            "(self.d_model=16)"  # the value of the field, beside the annotation that reads it
        )
    )
    assert got[1].startswith(COMPILED_NOTE)
    ok = torch.randn(2, 3, 16)
    torch.testing.assert_close(compiled(ok), generator(ok))


class _Five(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "b 5"]) -> Float[Tensor, "b 5"]:
        return x


class _Four(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "b 4"]) -> Float[Tensor, "b 4"]:
        return x


class _Outer(nn.Module):
    """Its own contract takes any width; the two inner ones do not, and both break on the same input."""

    def __init__(self):
        super().__init__()
        self.second, self.first, self.lin = _Four(), _Five(), nn.Linear(3, 3)  # (registered in another order)

    @checked
    def forward(self, x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        y = self.lin(x)
        a = self.first(x)  # eager stops here
        b = self.second(x)
        return y + 0 * a.sum() + 0 * b.sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_nested_violation_names_its_callers_and_the_first_one_is_raised(backend):
    outer = _Outer()
    torch._dynamo.reset()
    compiled = torch.compile(outer, fullgraph=True, backend=backend)
    x = torch.randn(2, 3)
    eager = _error_lines(lambda: outer(x))[0]
    assert eager == "_Outer.forward > _Five.forward: argument 'x' is f32[2,3], expected Float[Tensor, 'b 5'] with b=2"
    assert _error_lines(lambda: compiled(x))[0] == eager


def test_compiled_return_value_violation_reads_as_eager():
    @checked
    def shrink(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        return x[:, :1] * 2

    torch._dynamo.reset()
    compiled = torch.compile(shrink, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 3)
    eager = _error_lines(lambda: shrink(x))[0]
    assert eager.endswith(".shrink: the return value is f32[2,1], expected Float[Tensor, 'b n'] with b=2, n=3")
    assert _error_lines(lambda: compiled(x))[0] == eager


def test_compiled_violation_is_raised_even_when_nothing_uses_the_result():
    norm = T.LayerNorm(16)

    def step(x):
        norm(x)  # the result is dropped: only the contract can stop this call
        return x * 2

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    assert _error_lines(lambda: compiled(BAD_X))[0] == _error_lines(lambda: step(BAD_X))[0]


def test_contract_tables_are_constants_to_dynamo():
    """The tables are marked as torch.compiler.assume_constant_result marks a function (without importing Dynamo at
    import time), so Dynamo guards each contract once rather than every entry of its tables."""
    from transformer.contracts import traced

    def probe():
        return 0

    marked = torch.compiler.assume_constant_result(probe)
    markers = {name: value for name, value in vars(marked).items() if name.startswith("_dynamo")}
    read_spec = traced.Contract(probe).read_spec
    assert markers and all(getattr(read_spec, name, None) == value for name, value in markers.items())
    assert read_spec() is read_spec() and read_spec.__code__.co_argcount == 0  # no argument: see _constant_reader
