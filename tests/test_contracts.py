"""The contract switch (function, context manager, environment variable) and torch.compile safety."""

import os
import re
import subprocess
import sys

import pytest
import torch

import transformer as T
from transformer import TypeCheckError
from transformer.contracts import Float, Tensor, checked

BAD_X = torch.randn(2, 5, 8)  # wrong d_model for a 16-wide layer norm


def test_checks_on_by_default():
    assert T.checks_enabled()
    with pytest.raises(TypeCheckError):
        T.LayerNorm(16)(BAD_X)


def test_set_checks_turns_every_check_off():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4)
    src = torch.randint(1, 11, (2, 4))
    mask = T.padding_mask(src, 0)
    T.set_checks(False)
    assert not T.checks_enabled()
    # a float mask passes unchecked (and is no longer our business); an oversized id reaches nn.Embedding
    model.encode(src, mask.float().bool())
    bad = src.clone()
    bad[0, 0] = 11
    with pytest.raises(IndexError):
        model.encode(bad, mask)
    T.set_checks(True)
    with pytest.raises(ValueError, match="token id 11"):
        model.encode(bad, mask)


def test_checks_context_manager_restores_previous_state():
    norm = T.LayerNorm(16)
    with T.checks(False):
        with pytest.raises(RuntimeError):  # torch's own error, not a contract
            norm(BAD_X)
        with T.checks(True):
            with pytest.raises(TypeCheckError):
                norm(BAD_X)
        assert not T.checks_enabled()
    assert T.checks_enabled()
    with pytest.raises(ValueError), T.checks(False):
        raise ValueError("boom")
    assert T.checks_enabled()


def test_unchecked_call_skips_the_checker_entirely():
    calls = []

    @checked
    def f(x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:
        calls.append(1)
        return x

    with T.checks(False):
        assert f("not a tensor") == "not a tensor"
    assert calls == [1]
    with pytest.raises(TypeCheckError, match="f: argument 'x' is"):
        f("not a tensor")


def test_return_value_is_checked():
    @checked
    def shrink(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        return x[:, :1]

    with pytest.raises(TypeCheckError, match=r"shrink: the return value is f32\[2,1\].*with b=2, n=3"):
        shrink(torch.randn(2, 3))


@pytest.mark.parametrize("value, expected", [("0", False), ("off", False), ("1", True), ("", True)])
def test_environment_variable(value, expected):
    env = {**os.environ, "TYPED_TRANSFORMER_CHECKS": value}
    code = "import transformer; print(transformer.checks_enabled())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


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
    compiled(*args).sum().backward()
    used = [p for p in model.parameters() if p.grad is not None]
    assert len(used) > 10
    grads = [p.grad.clone() for p in used]
    model.zero_grad()
    model(*args).sum().backward()
    for g, p in zip(grads, used):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


def _annotation_dims(annotation):
    import typing

    dim_str = getattr(annotation, "dim_str", None)
    if dim_str is not None:
        yield from dim_str.split()
    for arg in typing.get_args(annotation):
        yield from _annotation_dims(arg)


def _checked_functions():
    import importlib
    import inspect
    import pkgutil

    import transformer

    for info in pkgutil.iter_modules(transformer.__path__):
        module = importlib.import_module(f"transformer.{info.name}")
        for _, obj in inspect.getmembers(module):
            candidates = [obj]
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                candidates = [getattr(obj, name) for name in vars(obj)]
            for fn in candidates:
                if callable(fn) and getattr(fn, "__module__", None) == module.__name__ and hasattr(fn, "__wrapped__"):
                    yield f"{module.__name__}.{fn.__qualname__}", fn.__wrapped__


def test_every_annotation_uses_the_dimension_vocabulary():
    import typing

    from transformer.contracts import DIMENSIONS

    seen = 0
    for name, fn in _checked_functions():
        for annotation in typing.get_type_hints(fn).values():
            for dim in _annotation_dims(annotation):
                bare = dim.lstrip("*#")
                if bare.startswith("{") or bare == "...":
                    continue
                for word in re.findall(r"[A-Za-z_]\w*", bare):  # symbolic sizes such as "steps+1" too
                    assert word in DIMENSIONS, f"{name}: dimension {word!r} ({dim!r}) is not in contracts.DIMENSIONS"
                    seen += 1
    assert seen > 50
