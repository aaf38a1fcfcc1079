"""Validation messages, the support check, the interpreter switch, gradcheck and torch.compile."""

import math
import os
import re
import subprocess
import sys

import pytest
import torch
from attention_reference import compiled_and_eager

from transformer.kernels import flash_attention, flash_attention_with_lse, unsupported_reason


def qkv(q_len=8, k_len=8, head_dim=16, dtype=torch.float32, batch=2, heads=2):
    return (
        torch.randn(batch, heads, q_len, head_dim, dtype=dtype),
        torch.randn(batch, heads, k_len, head_dim, dtype=dtype),
        torch.randn(batch, heads, k_len, head_dim, dtype=dtype),
    )


def test_interpreter_is_active():
    """conftest sets TRITON_INTERPRET=1 without CUDA; the kernels must really be interpreted then."""
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the kernels are compiled")
    q, k, v = qkv()
    flash_attention(q, k, v)
    from transformer.kernels import _forward

    assert type(_forward.fwd_kernel).__name__ == "InterpretedFunction"


def test_interpret_blocks_setting():
    """The interpreter's block shape (kernels/_tuning.py): set inside a ``with`` block and restored after it,
    also after an exception; what launches get under the interpreter; bad sizes refused, naming the argument."""
    from transformer.kernels import _tuning

    before = _tuning.get_interpret_blocks()
    assert before == (32, 32)
    with _tuning.interpret_blocks(16, 64):
        assert _tuning.get_interpret_blocks() == (16, 64)
        extra = _tuning.launch_kwargs(100, 40, 6)
        assert (extra["Q_BUCKET"], extra["K_BUCKET"], extra["BH_BUCKET"]) == (128, 64, 16)
        if _tuning.interpreting():
            assert (extra["BLOCK_M"], extra["BLOCK_N"]) == (16, 64)
        else:  # the autotuner picks the blocks on CUDA
            assert "BLOCK_M" not in extra and "BLOCK_N" not in extra
    assert _tuning.get_interpret_blocks() == before
    with pytest.raises(KeyError):
        with _tuning.interpret_blocks(64, 16):
            raise KeyError("inside")
    assert _tuning.get_interpret_blocks() == before
    for bad in (8, 48, 256, 32.0, True, None):
        with pytest.raises(ValueError, match=r"block_n must be one of \(16, 32, 64, 128\), got "):
            _tuning.set_interpret_blocks(32, bad)
    with pytest.raises(ValueError, match="block_m must be one of"):
        _tuning.set_interpret_blocks(24, 32)
    assert _tuning.get_interpret_blocks() == before
    assert _tuning.set_interpret_blocks(64, 32) == before
    assert _tuning.set_interpret_blocks(*before) == (64, 32)


def test_import_does_not_decorate_or_touch_the_driver():
    code = (
        "import sys, transformer.kernels as K; "
        "assert 'transformer.kernels._forward' not in sys.modules; "
        "import torch; print(K.unsupported_reason(*[torch.randn(1, 1, 4, 16)] * 3))"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "TRITON_INTERPRET=1 is not set" in result.stdout
    no_triton = (
        "import sys; sys.modules['triton'] = None\ntry:\n    import transformer.kernels\n"
        "except ImportError as error:\n    print('ImportError:', error)"
    )
    result = subprocess.run([sys.executable, "-c", no_triton], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("ImportError: import of triton halted"), result


SECOND_COPY = """
import gc, importlib, pathlib, sys, torch
import transformer.kernels
from transformer.kernels import _op

destroyed, destroy = [], torch.library.Library._destroy
torch.library.Library._destroy = lambda self: (destroyed.append(self.ns), destroy(self))[1]
op, q = _op.flash_attn_fwd_interpreted, torch.randn(1, 2, 20, 16)
before = op(q, q, q, None, None, None, None, True, 0.25, 0.0)[0]
importlib.reload(_op)  # a second copy of the module
root = pathlib.Path(sys.argv[1])
if (root / "kernels" / "__init__.py").is_file():  # the repository folder under its own name, as transformers probes it
    sys.path.insert(0, str(root))
    importlib.import_module("kernels")
gc.collect()
assert destroyed == [], f"registrations destroyed: {destroyed}"
for _ in range(20):
    assert torch.equal(op(q, q, q, None, None, None, None, True, 0.25, 0.0)[0], before)
print("ok")
"""


def test_a_second_copy_of_the_module_reuses_the_registered_ops():
    """Defining the ops again would destroy the first definition while the first copy's op objects still point at
    it: torch's dispatcher then reads freed memory (a segfault or std::bad_alloc several calls later)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", SECOND_COPY, root],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_an_explicit_scale_of_zero_is_used_not_the_default():
    """scale=0.0 makes every allowed score 0: the output is the plain mean of the allowed values and the logsumexp
    is log(number of allowed keys), causal or not (None would mean 1/sqrt(head_dim))."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)
    out, lse = flash_attention_with_lse(q, k, v, scale=0.0)
    torch.testing.assert_close(out, v.mean(dim=2, keepdim=True).expand_as(out), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, torch.full_like(lse, math.log(20)))
    out, lse = flash_attention_with_lse(q, k, v, scale=0, causal=True)
    allowed = torch.arange(1, 21, dtype=torch.float32)
    torch.testing.assert_close(out, v.cumsum(dim=2) / allowed[:, None], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, allowed.log().expand_as(lse))


@pytest.mark.parametrize(
    "head_dim, reason",
    [
        (16, None),
        (256, None),
        (15, "head_dim must be in [16, 256], got 15"),
        (257, "head_dim must be in [16, 256], got 257"),
    ],
)
def test_head_dims_from_16_to_256_inclusive_run_and_others_are_declined(head_dim, reason):
    q, k, v = qkv(q_len=5, k_len=7, head_dim=head_dim, batch=1, heads=1)
    got = unsupported_reason(q, k, v)
    assert got == reason if reason is None else got.startswith(reason), got
    if reason is None:
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(flash_attention(q, k, v), expected, atol=1e-5, rtol=1e-5)
    else:
        with pytest.raises(ValueError, match=re.escape(reason)):
            flash_attention(q, k, v)


BAD = [
    ("k batch", lambda q, k, v: (q, k[:1], v[:1]), {}, r"k batch \(dim 0\) must equal q's 2"),
    (
        "v heads",
        lambda q, k, v: (q, k, v[:, :1]),
        {},
        r"v heads \(dim 1\) must equal k's 2: k has shape \(2, 2, 8, 16\), "
        r"v has shape \(2, 1, 8, 16\)",
    ),
    (
        "k heads",
        lambda q, k, v: (q[:, :1].expand(2, 6, 8, 16), k[:, :1].expand(2, 4, 8, 16), v[:, :1].expand(2, 4, 8, 16)),
        {},
        r"k heads \(dim 1\) must divide q's 6 \(grouped-query attention.*\), got 4: q has shape \(2, 6, 8, 16\)",
    ),
    ("head_dim", lambda q, k, v: (q, k[..., :12], v[..., :12]), {}, r"k head_dim \(dim 3\) must equal q's 16"),
    ("v length", lambda q, k, v: (q, k, v[:, :, :5]), {}, r"v must have k's length 8"),
    ("3d", lambda q, k, v: (q[0], k[0], v[0]), {}, r"q must have 4 dims .* got shape \(2, 8, 16\)"),
    ("dtype mix", lambda q, k, v: (q, k.half(), v), {}, r"k.dtype must equal q.dtype=torch.float32, got torch.float16"),
    ("int q", lambda q, k, v: (q.long(), k, v), {}, r"q must be a floating tensor"),
    ("small d", lambda q, k, v: (q[..., :8], k[..., :8], v[..., :8]), {}, r"head_dim must be in \[16, 256\], got 8"),
    (
        "float mask",
        lambda q, k, v: (q, k, v),
        {"mask": torch.ones(8, 8)},
        r"mask must be a bool tensor .* got torch.float32",
    ),
    (
        "mask shape",
        lambda q, k, v: (q, k, v),
        {"mask": torch.ones(3, 8, 8, dtype=torch.bool)},
        r"mask of shape \(3, 8, 8\) is not broadcastable .* its heads dim is 3, expected 1 or 2",
    ),
    ("mask 5d", lambda q, k, v: (q, k, v), {"mask": torch.ones(1, 1, 1, 8, 8, dtype=torch.bool)}, r"at most 4 dims"),
    (
        "key_mask shape",
        lambda q, k, v: (q, k, v),
        {"key_mask": torch.ones(2, 7, dtype=torch.bool)},
        r"key_mask must have shape \(batch, k_len\)=\(2, 8\), got \(2, 7\)",
    ),
    (
        "key_mask dtype",
        lambda q, k, v: (q, k, v),
        {"key_mask": torch.ones(2, 8, dtype=torch.int64)},
        r"key_mask must be a bool tensor",
    ),
    ("key_lengths float", lambda q, k, v: (q, k, v), {"key_lengths": torch.ones(2)}, r"key_lengths must be an integer"),
    (
        "key_lengths shape",
        lambda q, k, v: (q, k, v),
        {"key_lengths": torch.ones(3, dtype=torch.int64)},
        r"key_lengths must have shape \(batch,\)=\(2,\), got \(3\)",
    ),
    ("dropout 1", lambda q, k, v: (q, k, v), {"dropout_p": 1.0}, r"dropout_p must be a float in \[0, 1\), got 1.0"),
    ("dropout neg", lambda q, k, v: (q, k, v), {"dropout_p": -0.1}, r"dropout_p must be a float in \[0, 1\)"),
]


@pytest.mark.parametrize("name,make,kwargs,message", BAD, ids=[b[0] for b in BAD])
def test_bad_inputs_raise_clear_value_errors(name, make, kwargs, message):
    q, k, v = make(*qkv())
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, v, **kwargs)
    reason = unsupported_reason(q, k, v, **kwargs)
    assert reason is not None and re.search(message, reason)


def test_unsupported_reason(monkeypatch):
    q, k, v = qkv()
    if not torch.cuda.is_available():
        assert unsupported_reason(q, k, v, mask=torch.ones(8, 8, dtype=torch.bool), dropout_p=0.1) is None
        assert "bfloat16 is not supported by the Triton CPU interpreter" in unsupported_reason(
            q.bfloat16(), k.bfloat16(), v.bfloat16()
        )
        with pytest.raises(RuntimeError, match="bfloat16"):
            flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1 is not set" in unsupported_reason(q, k, v)
    with pytest.raises(RuntimeError, match="needs CUDA tensors"):
        flash_attention(q, k, v)


def test_gradcheck_float64_with_masks():
    if torch.cuda.is_available():
        pytest.skip("float64 runs only under the Triton interpreter")
    q, k, v = (t.double().requires_grad_() for t in qkv(q_len=7, k_len=10, batch=2, heads=1))
    mask = torch.rand(7, 10) > 0.3
    mask[2] = False  # a fully masked row: zero output, zero gradient, lse -inf (replaced before comparing)

    def f(*x):
        out, lse = flash_attention_with_lse(*x, mask=mask, causal=True, key_lengths=torch.tensor([4, 10]))
        return out, lse.masked_fill(lse.isinf(), 0.0)

    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


def test_torch_compile_fullgraph_cpu():
    """Under the interpreter the op is an opaque custom op with a fake implementation: no graph break."""
    if torch.cuda.is_available():
        pytest.skip("the CUDA variant is test_gpu.py::test_torch_compile_fullgraph")
    q, k, v = (t.requires_grad_() for t in qkv(q_len=9, k_len=13))
    key_mask = torch.rand(2, 13) > 0.3

    def f(*x):
        return flash_attention(*x, causal=True, key_mask=key_mask, dropout_p=0.2, seed=4).sin().sum()

    (loss, grads), (expected, expected_grads) = compiled_and_eager(f, (q, k, v))
    assert torch.allclose(loss, expected, atol=1e-5)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_eager_path_and_registered_op_agree_bitwise():
    """Plain eager calls skip torch.library's dispatch (an autograd.Function over the same bodies, or the
    launcher itself without grad); the registered op (what torch.compile and dispatch modes see) gives the same
    bits: outputs, logsumexp and gradients, with masks and dropout."""
    from transformer.kernels import _api, _op

    q, k, v = qkv(q_len=9, k_len=13)
    key_mask = torch.rand(2, 13, generator=torch.Generator().manual_seed(1)) > 0.3
    state = _api.philox_state(7, q.device)
    results = []
    for path in ("eager", "op"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        args = (*leaves, None, key_mask, None, state, True, 0.25, 0.2)
        out, lse = _op.attention(*args) if path == "eager" else _op.flash_attn_fwd_interpreted(*args)
        expected = "_EagerFlashAttention" if path == "eager" else "typed_transformer_flash_attn_fwd_interpreted"
        assert expected in type(out.grad_fn).__name__, out.grad_fn
        (out.sin().sum() + lse.masked_fill(lse.isinf(), 0).sum()).backward()
        results.append([out, lse] + [t.grad for t in leaves])
    for a, b in zip(*results, strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():
        out, lse = _op.attention(q, k, v, None, key_mask, None, state, True, 0.25, 0.2)
    assert out.grad_fn is None and torch.equal(out, results[0][0].detach())


def test_fake_tensors_go_through_the_registered_op():
    """Under FakeTensorMode (a dispatch mode) nothing is launched: the op's fake implementation gives the
    shapes and dtypes."""
    from launch_capture import launches
    from torch._subclasses.fake_tensor import FakeTensorMode

    with launches() as seen, FakeTensorMode():
        q, k, v = (torch.empty(2, 3, n, 16) for n in (5, 7, 7))
        out, lse = flash_attention_with_lse(q, k, v, causal=True, dropout_p=0.1)
    assert seen == []
    assert out.shape == (2, 3, 5, 16) and lse.shape == (2, 3, 5) and lse.dtype == torch.float32


def test_double_backward_is_refused():
    """The kernels' backward has no backward of its own: asking for one raises instead of returning silently
    wrong second derivatives."""
    q, k, v = (t.requires_grad_() for t in qkv())
    loss = flash_attention(q, k, v).square().sum()  # its gradient w.r.t. the output depends on q, k, v
    grads = torch.autograd.grad(loss, (q, k, v), create_graph=True)
    with pytest.raises(RuntimeError, match="marked with @once_differentiable"):
        grads[0].sum().backward()


def test_a_dispatch_mode_sees_the_registered_op():
    """Under any dispatch mode (here one that records the ops it sees), plain tensors also go through the registered
    op, so the mode sees ``typed_transformer::flash_attn_fwd_interpreted`` (and, on CUDA, its triton_op), not the
    kernels' raw launches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recording(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = qkv()
    with Recording() as mode:
        out = flash_attention(q, k, v, causal=True)
    assert any("typed_transformer" in op and "flash_attn_fwd" in op for op in mode.ops), mode.ops
    assert torch.equal(out, flash_attention(q, k, v, causal=True))
