"""Issue 27's faults that only a GPU would show, tested on the CPU: the explicit seed's host-to-device copy, autotuning
during CUDA graph capture, launches on a device that is not the current one, a strided grad_out, and the head_dim
above which automatic backend selection declines the kernel. The GPU versions are in test_gpu.py."""

import contextlib

import pytest
import torch
from launch_capture import launched, launches
from torch.utils._python_dispatch import TorchDispatchMode

from transformer.kernels import _api, _args, _backward, _forward, _op, _tuning, auto_reason, flash_attention, tune


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((str(func), [a.device.type for a in args if isinstance(a, torch.Tensor)]))
        return func(*args, **(kwargs or {}))


def test_explicit_seed_is_built_on_the_device_without_a_host_copy():
    """seed=int: the (seed, 0) pair is written on the target device by fill kernels. Built from a host list
    (torch.tensor([seed, 0], device=cuda)) it would be a pageable host-to-device copy: a wait for the GPU each
    call, and an error inside torch.cuda.graph capture. Checked on the meta device, where a copy shows as an op
    that reads a CPU tensor."""
    with _Ops() as seen:
        state = _api.philox_state(2**64 + 5, torch.device("meta"))
    assert state.device.type == "meta" and state.shape == (2,) and state.dtype == torch.int64
    assert seen.ops and all("cpu" not in devices for _, devices in seen.ops), seen.ops
    assert not any("copy" in op or "lift_fresh" in op for op, _ in seen.ops), seen.ops
    assert _api.philox_state(2**64 + 5, torch.device("cpu")).tolist() == [5, 0]
    assert _api.philox_state(2**63, torch.device("cpu")).tolist() == [-(2**63), 0]
    assert _api.philox_state(-1, torch.device("cpu")).tolist() == [-1, 0]


@pytest.fixture
def capture(monkeypatch):
    """Make every tuned kernel count as autotuned-on-CUDA and let the test say when a graph is being captured."""
    state = {"capturing": False}
    monkeypatch.setattr(_tuning, "_tuned", {"forward", "split", "dkdv", "dq"})
    monkeypatch.setattr(_tuning, "_ready", set())
    monkeypatch.setattr(_tuning, "capturing", lambda device: state["capturing"])
    return state


def _inputs(heads=4, kv_heads=2, q_len=40, k_len=40):
    q = torch.randn(2, heads, q_len, 16, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, k_len, 16, requires_grad=True) for _ in range(2))
    return q, k, v


def test_an_untuned_key_during_capture_raises_a_clear_error_and_tune_ahead_allows_it(capture):
    q, k, v = _inputs()
    capture["capturing"] = True
    with pytest.raises(RuntimeError, match=r"not been autotuned .* CUDA graph capture.*transformer\.kernels\.tune"):
        flash_attention(q, k, v, causal=True)
    capture["capturing"] = False
    tune(q, k, v, causal=True)
    capture["capturing"] = True
    out = flash_attention(q, k, v, causal=True)  # same key: no timing needed, so capture may go on
    out.sum().backward()
    assert q.grad is not None and k.grad is not None
    for other in (
        dict(causal=False),
        dict(causal=True, dropout_p=0.1),  # what changes the key is not tuned
        dict(causal=True, key_lengths=torch.tensor([30, 20])),
    ):
        with pytest.raises(RuntimeError, match="not been autotuned"):
            flash_attention(q, k, v, **other)
    q8, k8, v8 = _inputs(heads=8, kv_heads=2)  # another GQA group (and batch x heads bucket)
    with pytest.raises(RuntimeError, match="not been autotuned"):
        flash_attention(q8, k8, v8, causal=True)
    with pytest.raises(ValueError, match="dropout_p must be a float in"):
        tune(q, k, v, dropout_p=2.0)


def test_tune_ahead_covers_the_backward(capture):
    q, k, v = _inputs()
    tune(q, k, v, backward=False)
    capture["capturing"] = True
    out = flash_attention(q, k, v)  # the forward was tuned
    with pytest.raises(RuntimeError, match=r"\['dkdv', 'dq'\] have not been autotuned"):
        out.sum().backward()


def test_pinned_kernels_need_no_tuning_during_capture(capture):
    capture["capturing"] = True
    _tuning._tuned.clear()  # e.g. TYPED_TRANSFORMER_KERNEL_CONFIGS=first
    q, k, v = _inputs()
    flash_attention(q, k, v).sum().backward()


def test_device_guard_makes_the_tensors_device_current(monkeypatch):
    """A tensor on cuda:1 while cuda:0 is current: launches run inside ``torch.cuda.device(1)``; nothing is switched
    for the current device or off CUDA."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    guard = _args.device_guard(torch.device("cuda", 1))
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1
    assert isinstance(_args.device_guard(torch.device("cuda", 0)), contextlib.nullcontext)
    assert isinstance(_args.device_guard(torch.device("cpu")), contextlib.nullcontext)


def test_every_launch_runs_inside_the_device_guard(monkeypatch):
    active, inside = [], []

    @contextlib.contextmanager
    def recording_guard(device):
        active.append(device)
        yield
        active.pop()

    def recording_launch(kernel):  # records, runs nothing
        class Launch:
            def __getitem__(self, grid):
                return lambda *args, **kwargs: inside.append((kernel.__name__, list(active)))

        return Launch()

    for module in (_forward, _backward):
        monkeypatch.setattr(module, "device_guard", recording_guard)
    monkeypatch.setattr(_op, "eager_launch", recording_launch)
    q, k, v = _inputs()
    out = flash_attention(q, k, v)
    out.backward(torch.ones_like(out))
    with _tuning.force_kv_splits(2):
        flash_attention(*(t.detach() for t in _inputs(q_len=1, k_len=300)))
    names = [name for name, _ in inside]
    assert {"_fwd_kernel", "_delta_kernel", "_dkdv_kernel", "_dq_kernel", "_combine_kernel"} <= set(names), names
    assert all(devices == [q.device] for _, devices in inside), inside


def test_expanded_or_strided_grad_out_is_made_contiguous():
    """out.sum().backward() hands the backward an expanded grad_out (every stride 0) and a transposed one has a
    strided head_dim: the kernels get a contiguous copy (unit head_dim stride, rows head_dim apart)."""
    q, k, v = _inputs()
    for make_grad in (
        lambda out: out.sum().backward(),
        lambda out: out.backward(torch.randn(2, 4, 16, 40).transpose(-1, -2)),
    ):
        with launches(run=False) as seen:
            make_grad(flash_attention(q, k, v))
        for kernel in ("_dkdv_kernel", "_dq_kernel"):
            args = launched(seen, kernel)
            assert (args["s_dm"], args["s_dd"]) == (16, 1), (kernel, args["s_dm"], args["s_dd"])
    q, k, v = _inputs()  # the values are still right
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    flash_attention(q, k, v).sum().backward()
    torch.nn.functional.scaled_dot_product_attention(*ref, enable_gqa=True).sum().backward()
    for mine, theirs in zip((q, k, v), ref, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-4, rtol=1e-4)


def test_negative_scale_matches_the_reference():
    """The kernels fold the scale into one multiply-add after a running max of unscaled scores, which needs
    scale >= 0; a negative scale is handled by negating q (autograd carries dq back)."""
    q, k, v = _inputs(kv_heads=4)
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(q, k, v, scale=-0.3, causal=True)
    causal = torch.ones(40, 40, dtype=torch.bool).tril()  # (SDPA itself gives NaN for a negative causal scale)
    scores = (ref[0] @ ref[1].transpose(-1, -2) * -0.3).masked_fill(~causal, float("-inf"))
    expected = scores.softmax(-1) @ ref[2]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    out.backward(torch.ones_like(out))
    expected.backward(torch.ones_like(expected))
    for mine, theirs in zip((q, k, v), ref, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-4, rtol=1e-4)


def test_auto_declines_head_dim_above_128():
    """Automatic backend selection does not take the kernel above head_dim 128 (every head_dim-256 dK/dV config
    spills on sm_90; expected slower than SDPA until a GPU measures it); the kernel still runs them by name."""
    for head_dim in (16, 64, 128):
        assert auto_reason(torch.empty(1, 1, 4, head_dim)) is None
    for head_dim in (129, 192, 256):
        assert "expected to be slower than SDPA" in auto_reason(torch.empty(1, 1, 4, head_dim))


class _OnCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA, so the auto rule's CUDA branch can be tested without a GPU."""

    @property
    def is_cuda(self):
        return True


def test_resolve_backend_auto_consults_the_kernels_auto_rule():
    from transformer import backends

    chosen = {}
    for head_dim in (64, 256):
        q, k, v = (
            torch.Tensor._make_subclass(_OnCuda, torch.randn(1, 2, 8, head_dim, dtype=torch.float16)) for _ in range(3)
        )
        chosen[head_dim] = backends.resolve_backend("auto", q, k, v, None, 0.0)
        assert backends.resolve_backend("triton", q, k, v, None, 0.0) == "triton"  # by name: still the kernel
    assert chosen[64] == "triton" and chosen[256] != "triton", chosen
