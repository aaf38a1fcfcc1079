"""How the attention backend is chosen: a run-time choice (argument > use_backend > module default > auto),
per thread and per asyncio task, never part of a checkpoint's identity; auto's pick per device; the kernel's
inputs validated once per call."""

import asyncio
import logging
import threading

import pytest
import torch
import torch.nn.functional as F

import transformer as T
from transformer import backends
from transformer import sdpa as sdpa_module
from transformer.backends import choice, torch_backend
from transformer.checkpoint import load_checkpoint, save_checkpoint


def _qkv(b=2, h=3, lq=5, lk=7, d=16):
    return torch.randn(b, h, lq, d), torch.randn(b, h, lk, d), torch.randn(b, h, lk, d)


@pytest.fixture
def spy(monkeypatch):
    """Records which backend computed each attention: 'eager' (the reference), 'torch' (F.sdpa), 'triton'."""
    seen: list[str] = []
    real_sdpa, real_ref = F.scaled_dot_product_attention, backends.attention.unchecked

    def sdpa(*args, **kwargs):
        seen.append("torch")
        return real_sdpa(*args, **kwargs)

    def ref(*args, **kwargs):
        seen.append("eager")
        return real_ref(*args, **kwargs)

    real_dropin_ref = sdpa_module.reference

    def ref_dropin(*args, **kwargs):
        seen.append("eager")
        return real_dropin_ref(*args, **kwargs)

    monkeypatch.setattr(torch_backend, "_TORCH_SDPA", sdpa)  # torch's operator, as the torch backend calls it
    monkeypatch.setattr(backends.attention, "unchecked", ref)
    monkeypatch.setattr(sdpa_module, "reference", ref_dropin)  # the drop-in's eager backend: torch's definition
    from transformer import kernels

    real_flash = kernels.flash_attention

    def flash(*args, **kwargs):
        seen.append("triton")
        return real_flash(*args, **kwargs)

    monkeypatch.setattr(kernels, "flash_attention", flash)
    return seen


def test_precedence_argument_over_context_over_module_default(spy):
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0, backend="eager").eval()
    x = torch.randn(1, 3, 32)
    mha(x, x, x)  # the module's default
    with T.use_backend("torch"):
        mha(x, x, x)  # the context beats the module
        with T.use_backend("triton"):
            mha(x, x, x)  # the innermost context wins
        q, k, v = _qkv()
        T.scaled_dot_product_attention(q, k, v, backend="eager")  # the argument beats the context
        assert T.current_backend() == "torch"
    mha(x, x, x)
    assert T.current_backend() is None
    assert spy == ["eager", "torch", "triton", "eager", "eager"]


def test_auto_picks_torch_on_the_cpu(spy):
    q, k, v = _qkv()
    T.scaled_dot_product_attention(q, k, v, backend="auto")
    T.MultiHeadedAttention(2, 32, dropout=0.0).eval()(
        torch.randn(1, 3, 32), torch.randn(1, 4, 32), torch.randn(1, 4, 32)
    )
    assert spy == ["torch", "torch"]


def test_auto_picks_the_reference_for_float64_which_supports_double_backward(spy):
    q, k, v = (t.double().requires_grad_(True) for t in _qkv(lq=3, lk=4, d=4))
    assert torch.autograd.gradgradcheck(lambda *x: T.scaled_dot_product_attention(*x, backend="auto"), (q, k, v))
    assert set(spy) == {"eager"}


def test_auto_on_cuda_takes_triton_when_the_kernel_can_else_torch_and_says_why(monkeypatch, caplog):
    q, k, v = _qkv()
    fake_cuda = type("FakeCuda", (), {"is_cuda": True, "dtype": torch.bfloat16})()
    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a: None)
    assert backends.resolve_backend("auto", fake_cuda, k, v, None, 0.0) == "triton"
    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a: "head_dim 300 is above 256")
    with caplog.at_level(logging.INFO, logger="transformer.backends"):
        assert backends.resolve_backend("auto", fake_cuda, k, v, None, 0.0) == "torch"
    assert "does not use triton here: head_dim 300 is above 256" in caplog.text


def test_a_named_backend_never_falls_back(monkeypatch):
    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a: "CPU tensors need TRITON_INTERPRET=1")
    q, k, v = _qkv()
    with pytest.raises(
        ValueError, match="attention backend 'triton' cannot run these inputs: CPU tensors need TRITON_INTERPRET=1"
    ):
        T.scaled_dot_product_attention(q, k, v, backend="triton")
    with pytest.raises(
        ValueError, match="attention backend must be one of 'auto', 'eager', 'torch', 'triton'; got 'flash'"
    ):
        T.scaled_dot_product_attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="got 'cudnn'"), T.use_backend("cudnn"):
        pass


def test_threads_keep_their_own_backend(spy):
    """Two threads inside different use_backend blocks, interleaved by a barrier, each see their own choice."""
    barrier = threading.Barrier(2)
    results: dict[str, list[str | None]] = {}

    def worker(name):
        seen = []
        with T.use_backend(name):
            for _ in range(3):
                barrier.wait()
                seen.append(T.current_backend())
        results[name] = seen + [T.current_backend()]

    threads = [threading.Thread(target=worker, args=(name,)) for name in ("eager", "torch")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"eager": ["eager"] * 3 + [None], "torch": ["torch"] * 3 + [None]}
    assert T.current_backend() is None


def test_asyncio_tasks_keep_their_own_backend(spy):
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0, backend="auto").eval()
    x = torch.randn(1, 3, 32)
    order = []

    async def task(name):
        with T.use_backend(name):
            for _ in range(2):
                await asyncio.sleep(0)  # let the other task run inside its own block
                order.append((name, T.current_backend()))
                mha(x, x, x)

    async def main():
        await asyncio.gather(task("eager"), task("torch"))

    asyncio.run(main())
    assert order == [("eager", "eager"), ("torch", "torch")] * 2
    assert spy == ["eager", "torch"] * 2


def test_triton_inputs_are_validated_once_per_attention(monkeypatch):
    from transformer.kernels import _api, _validate

    calls = []
    real = _validate.validate
    counting = lambda *a, **k: calls.append(1) or real(*a, **k)  # noqa: E731
    monkeypatch.setattr(_validate, "validate", counting)  # what unsupported_reason runs
    monkeypatch.setattr(_api, "check_inputs", counting)  # what flash_attention runs unless told not to
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0, backend="triton").eval()
    x = torch.randn(2, 5, 32)
    out = mha(x, x, x, T.AttentionMask(causal=True))
    with T.use_backend("eager"):
        torch.testing.assert_close(out, mha(x, x, x, T.AttentionMask(causal=True)), rtol=1e-5, atol=1e-5)
    assert len(calls) == 1


def test_the_backend_is_not_part_of_a_checkpoint(tmp_path):
    trained = T.make_model(11, 11, N=1, d_model=32, d_ff=32, h=2, attention_backend="eager")
    save_checkpoint(tmp_path / "ckpt", trained)
    stored = (tmp_path / "ckpt" / "config.json").read_text()
    assert "attention_backend" not in stored
    for backend in ("torch", "triton", "auto"):
        other = T.make_model(11, 11, N=1, d_model=32, d_ff=32, h=2, attention_backend=backend)
        ckpt = load_checkpoint(tmp_path / "ckpt", model=other)  # no ConfigMismatchError
        assert ckpt.model is other and other.config.attention_backend == backend
        assert all(
            torch.equal(a, b) for a, b in zip(trained.state_dict().values(), other.state_dict().values(), strict=True)
        )
    with pytest.raises(T.ConfigMismatchError, match="d_ff"):
        load_checkpoint(tmp_path / "ckpt", model=T.make_model(11, 11, N=1, d_model=32, d_ff=64, h=2))
    assert (
        T.TransformerConfig(src_vocab=3, tgt_vocab=3, attention_backend="torch").differences(
            T.TransformerConfig(src_vocab=3, tgt_vocab=3), architecture_only=True
        )
        == {}
    )


def test_auto_takes_torch_for_float32_on_cuda_and_says_why_at_debug_level(monkeypatch, caplog):
    """Issue 18: the kernel's float32 dots run without tensor cores, so auto takes SDPA for float32 on CUDA (even
    where the kernel would take the inputs) and logs why at DEBUG; other dtypes still get the kernel, and the kernel
    stays available by name for float32."""
    q, k, v = _qkv(d=16)
    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a: None)  # the kernel would take every input
    cuda = {
        dtype: type("FakeCuda", (), {"is_cuda": True, "dtype": dtype})() for dtype in (torch.float32, torch.float16)
    }
    with caplog.at_level(logging.DEBUG, logger="transformer.backends"):
        assert backends.resolve_backend("auto", cuda[torch.float32], k, v, None, 0.0) == "torch"
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "does not use triton for float32 inputs" in caplog.text and "by name" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="transformer.backends"):
        assert backends.resolve_backend("auto", cuda[torch.float16], k, v, None, 0.0) == "triton"
        assert backends.resolve_backend("triton", cuda[torch.float32], k, v, None, 0.0) == "triton"
    assert caplog.records == []


class _Graphs(list):
    """A torch.compile backend that keeps every graph it is given (one per trace) and runs it as traced."""

    def __call__(self, gm, example_inputs):
        self.append(gm)
        return gm.forward

    def calls(self, index: int) -> set[str]:
        return {
            getattr(node.target, "__name__", str(node.target))
            for node in self[index].graph.nodes
            if node.op in ("call_function", "call_method")
        }


def test_under_torch_compile_the_backend_choice_is_guarded_and_a_refusal_raises_as_in_eager(monkeypatch):
    """A model compiled under one choice traces again inside use_backend(...) for another (and runs the new backend:
    its graph calls it, its output is eager mode's under that choice); back outside, the first graph is reused. A
    backend that cannot run raises eager mode's ValueError from the compiled graph (fullgraph=True holds), also when
    Triton is missing. Before, current_backend() was assume_constant_result: the first graph served every choice."""
    torch._dynamo.reset()
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(2, 3, 32)
    graphs = _Graphs()
    compiled = torch.compile(mha, backend=graphs, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(x, x, x), mha(x, x, x))
        assert len(graphs) == 1 and "scaled_dot_product_attention" in graphs.calls(0)  # auto: torch on a CPU
        with T.use_backend("eager"):
            assert torch.equal(compiled(x, x, x), mha(x, x, x))
        assert len(graphs) == 2  # traced again under the new choice
        assert "softmax" in graphs.calls(1) and "scaled_dot_product_attention" not in graphs.calls(1)
        assert torch.equal(compiled(x, x, x), mha(x, x, x))
        assert len(graphs) == 2  # back outside: the first graph again

        missing = f"Triton is not installed; install it with: {backends.TRITON_INSTALL_HINT}"
        monkeypatch.setattr(choice, "triton_missing_reason", lambda: missing)  # as on a machine without Triton
        with T.use_backend("triton"):
            with pytest.raises(ValueError) as eager:
                mha(x, x, x)
            with pytest.raises(ValueError) as from_graph:
                compiled(x, x, x)
        assert (
            str(from_graph.value)
            == str(eager.value)
            == f"attention backend 'triton' cannot run these inputs: {missing}"
        )
        assert len(graphs) == 3


def test_a_use_backend_block_inside_a_compiled_function_governs_its_calls():
    torch._dynamo.reset()
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(1, 3, 32)

    def inside(x):
        with T.use_backend("eager"):
            return mha(x, x, x) + 0 * len(T.current_backend())

    graphs = _Graphs()
    compiled = torch.compile(inside, backend=graphs, fullgraph=True)
    with torch.no_grad(), T.use_backend("torch"):
        assert torch.equal(compiled(x), inside(x))
        assert T.current_backend() == "torch"
    assert len(graphs) == 1 and "softmax" in graphs.calls(0) and "scaled_dot_product_attention" not in graphs.calls(0)
    assert choice.CHOICE.trace_stack == []


def test_nested_use_backend_blocks_inside_a_compiled_function_resolve_to_the_innermost_as_in_eager():
    torch._dynamo.reset()
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(1, 3, 32)

    def nested(x):
        with T.use_backend("eager"):
            with T.use_backend("torch"):
                inner = mha(x, x, x)
                inner_name = T.current_backend()
            outer = mha(x, x, x)
            return inner, outer, inner_name, T.current_backend()

    graphs = _Graphs()
    compiled = torch.compile(nested, backend=graphs, fullgraph=True)
    with torch.no_grad():
        inner, outer, inner_name, outer_name = compiled(x)
        assert (inner_name, outer_name) == nested(x)[2:] == ("torch", "eager")
        assert torch.allclose(inner, outer, atol=1e-6)
    calls = graphs.calls(0)
    assert "scaled_dot_product_attention" in calls and "softmax" in calls  # the inner call on torch, the outer eager
    assert choice.CHOICE.trace_stack == []


def test_auto_takes_the_reference_where_torchs_fused_attention_gives_nan_on_fully_masked_rows(monkeypatch, spy):
    """torch < 2.5 returns NaN for a query row whose every key is masked; auto must not pick it there."""
    monkeypatch.setattr(choice, "_TORCH_ZEROES_EMPTY_ROWS", False)
    q, k, v = _qkv()
    mask = T.AttentionMask(key_lengths=torch.tensor([0, 7]))
    out = T.scaled_dot_product_attention(q, k, v, mask, backend="auto")
    assert spy == ["eager"] and out[0].abs().sum() == 0


def test_importing_the_package_does_not_import_dynamo_for_the_backend_choice():
    """`@torch._dynamo.assume_constant_result` on current_backend imported Dynamo at `import transformer` (about a
    second, in every process) and froze the choice under torch.compile; nothing in backends.py touches Dynamo now."""
    import inspect

    assert "_dynamo" not in inspect.getsource(backends)
    assert not [name for name in vars(backends.current_backend) if "dynamo" in name]


@pytest.mark.parametrize("backend", ["eager", "torch"])
@pytest.mark.parametrize("mask", ["causal", "key lengths"])
def test_every_backend_multiplies_the_scores_by_the_modules_scale(backend, mask):
    """CausalSelfAttention(scale=tau): softmax(tau * Q K^T + M) V W^O on each backend (tau far from 1/sqrt(d_k))."""
    from transformer.lm.attention import CausalSelfAttention
    from transformer.masks import AttentionMask

    torch.manual_seed(0)
    attention = CausalSelfAttention(2, 16, 0.0, scale=0.9, backend=backend).eval()
    x = torch.randn(2, 5, 16)
    lengths = torch.tensor([5, 3])
    structured = AttentionMask(causal=True) if mask == "causal" else AttentionMask(key_lengths=lengths, causal=True)
    q, k, v = (attention.split_heads(p(x)) for p in (attention.q_proj, attention.k_proj, attention.v_proj))
    allowed = torch.ones(5, 5, dtype=torch.bool).tril().expand(2, 1, 5, 5).clone()
    if mask == "key lengths":
        allowed &= (torch.arange(5) < lengths[:, None])[:, None, None, :]
    scores = (0.9 * q @ k.transpose(-1, -2)).masked_fill(~allowed, float("-inf"))
    expected = attention.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 16))
    with torch.no_grad():
        torch.testing.assert_close(attention(x, structured), expected, atol=1e-5, rtol=1e-5)
