"""transformer.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention itself.

A seeded generator draws the cases (ranks 2-5, broadcast batch dims, every mask form and rank, float masks with -inf
rows, causal with L < S and L > S, GQA ratios 1/2/4/8); each runs on every backend that runs on the CPU and is
compared, forward and gradients, with torch's function. The kernel runs under TRITON_INTERPRET=1 (few, small cases,
judged by the FlashAttention rule). Inputs torch refuses are refused with torch's exception type.
"""

import logging
import random

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import transformer as T
from transformer import kernels
from transformer import sdpa as sdpa_module
from transformer.backends import choice
from transformer.backends import torch_backend as torch_backend_module

CPU_BACKENDS = ["auto", "eager", "torch"]


def test_the_signature_is_torchs_with_the_extras_keyword_only_and_every_path_is_the_same_function():
    """Names, order and defaults as torch's own docstring declares them (F.scaled_dot_product_attention is a builtin
    with no inspectable signature); the extras ``backend``, ``softcap``, ``alibi_slopes``, ``sinks`` keyword-only
    after them."""
    import inspect
    import sys

    declared = F.scaled_dot_product_attention.__doc__.split(")", 1)[0].split("(", 1)[1]
    theirs = [p.strip() for p in declared.replace("\n", " ").split(",")]
    params = inspect.signature(T.scaled_dot_product_attention).parameters.values()
    ours = [p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}" for p in params]
    assert ours == theirs + ["backend=None", "softcap=None", "alibi_slopes=None", "sinks=None"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(params)[-4:])
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in list(params)[:-4])
    assert T.scaled_dot_product_attention is sdpa_module.scaled_dot_product_attention
    assert sys.modules["transformer.attention"].scaled_dot_product_attention is sdpa_module.scaled_dot_product_attention


def _torch_math(*args, **kwargs):
    """torch's function on its reference (math) backend, which accepts every input torch's definition allows."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def _shape(rng, full, keep_rank=True):
    """``full`` with some dims made 1 (broadcast), and sometimes leading dims dropped."""
    shape = [1 if rng.random() < 0.3 else n for n in full]
    if not keep_rank and len(shape) > 2 and rng.random() < 0.3:
        shape = shape[rng.randint(1, len(shape) - 2) :]
    return shape


def _case(seed):
    """One random case: (query, key, value, kwargs) that torch's function accepts."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    dtype = rng.choice([torch.float32, torch.float64])
    rank = rng.choice([2, 3, 4, 4, 5])
    q_len, k_len, e = rng.choice([1, 3, 6]), rng.choice([1, 4, 7]), rng.choice([4, 8])
    ev = rng.choice([e, 5])
    lead = [rng.choice([1, 2, 3]) for _ in range(rank - 2)]
    kwargs = {}
    kv_lead = list(lead)
    if rank >= 3 and rng.random() < 0.5:  # grouped-query attention, ratios 1/2/4/8
        kv_heads, ratio = rng.choice([1, 2]), rng.choice([1, 2, 4, 8])
        lead[-1], kv_lead[-1] = kv_heads * ratio, kv_heads
        kwargs["enable_gqa"] = True
    q_shape = _shape(rng, lead, keep_rank=False) + [q_len, e]
    if kwargs.get("enable_gqa"):  # heads stay as given; the other leading dims may broadcast
        q_shape = [*_shape(rng, lead[:-1]), lead[-1], q_len, e]
        k_lead = [*_shape(rng, kv_lead[:-1]), kv_lead[-1]]
        v_lead = [*_shape(rng, kv_lead[:-1]), kv_lead[-1]]
    else:
        k_lead, v_lead = _shape(rng, lead, keep_rank=False), _shape(rng, lead, keep_rank=False)
    q = torch.randn(q_shape, generator=gen, dtype=dtype)
    k = torch.randn(k_lead + [k_len, e], generator=gen, dtype=dtype)
    v = torch.randn(v_lead + [k_len, ev], generator=gen, dtype=dtype)
    out_lead = (
        list(torch.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v))))
        if not kwargs
        else [*torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]), q.size(-3)]
    )
    kind = rng.choice(["none", "bool", "float", "float-inf-rows", "causal"])
    if kind == "causal":
        kwargs["is_causal"] = True
    elif kind != "none":
        mask_rank = rng.randint(1, len(out_lead) + 2)
        full = (out_lead + [q_len, k_len])[-mask_rank:]
        mask_shape = _shape(rng, full)
        if kind == "bool":
            mask = torch.rand(mask_shape, generator=gen) > 0.3
            if mask.dim() >= 2 and mask.size(-2) > 1:
                mask[..., 0, :] = False  # a query row that may attend nothing
        else:
            mask = torch.randn(mask_shape, generator=gen, dtype=rng.choice([torch.float32, dtype]))
            if kind == "float-inf-rows":
                mask = mask.masked_fill(torch.rand(mask_shape, generator=gen) < 0.3, float("-inf"))
                if mask.dim() >= 2:
                    mask[..., -1, :] = float("-inf")  # every key of the last row (or of every row) is -inf
            mask.requires_grad_(True)
        kwargs["attn_mask"] = mask
    if rng.random() < 0.3:
        kwargs["scale"] = rng.choice([0.1, 0.77, -0.5])
    return q, k, v, kwargs


def _grads(fn, q, k, v, kwargs, grad_seed):
    inputs = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    mask = kwargs.get("attn_mask")
    kw = dict(kwargs)
    if mask is not None and mask.requires_grad:
        kw["attn_mask"] = mask.detach().clone().requires_grad_(True)
    out = fn(*inputs, **kw)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed), dtype=out.dtype)
    out.backward(g)
    grads = [t.grad for t in inputs]
    if "attn_mask" in kw and kw["attn_mask"].requires_grad:
        grads.append(kw["attn_mask"].grad)
    return out, grads


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_random_cases_match_torch_forward_and_gradients(backend):
    kinds = set()
    for seed in range(40):
        q, k, v, kwargs = _case(seed)
        kinds.add(
            (
                q.dim(),
                "enable_gqa" in kwargs,
                "is_causal" in kwargs,
                getattr(kwargs.get("attn_mask"), "dtype", None) == torch.bool,
            )
        )
        want, want_grads = _grads(_torch_math, q, k, v, kwargs, seed)
        got, got_grads = _grads(
            lambda *a, **kw: T.scaled_dot_product_attention(*a, **kw, backend=backend), q, k, v, kwargs, seed
        )
        assert got.shape == want.shape and got.dtype == want.dtype, (seed, got.shape, want.shape)
        torch.testing.assert_close(
            got, want, msg=lambda m, seed=seed, kwargs=kwargs: f"case {seed} ({kwargs.keys()}): {m}"
        )
        for i, (a, b) in enumerate(zip(got_grads, want_grads, strict=True)):
            torch.testing.assert_close(a, b, msg=lambda m, seed=seed, i=i: f"case {seed} gradient {i}: {m}")
    # the generator covered what it should: every rank, GQA, causal, boolean masks
    assert {r for r, *_ in kinds} == {2, 3, 4, 5}
    assert any(g for _, g, _, _ in kinds) and any(c for _, _, c, _ in kinds) and any(b for *_, b in kinds)


def test_the_case_generator_draws_every_mask_form_and_gqa_ratio():
    seen_masks, ratios, lengths = set(), set(), set()
    for seed in range(40):
        q, k, v, kwargs = _case(seed)
        mask = kwargs.get("attn_mask")
        if mask is not None:
            inf_rows = mask.dtype != torch.bool and bool(torch.isinf(mask).all(-1).any())
            seen_masks.add((mask.dtype == torch.bool, mask.dim(), inf_rows))
        if kwargs.get("enable_gqa"):
            ratios.add(q.size(-3) // k.size(-3))
        if kwargs.get("is_causal"):
            lengths.add((q.size(-2) > k.size(-2), q.size(-2) < k.size(-2)))
    assert {dims for _, dims, _ in seen_masks} >= {1, 2, 3, 4}
    assert any(inf for *_, inf in seen_masks) and {b for b, *_ in seen_masks} == {True, False}
    assert ratios == {1, 2, 4, 8}
    assert {(True, False), (False, True)} <= lengths  # causal with L > S and L < S


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_are_zero_as_on_every_torch_backend(backend, mask_kind):
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    allowed = torch.rand(2, 1, 4, 5) > 0.3
    allowed[:, :, 1] = False  # query row 1 may attend nothing
    mask = allowed if mask_kind == "bool" else torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    results = []
    for torch_backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):  # the two that run on a CPU
        with sdpa_kernel(torch_backend):
            results.append(_grads(F.scaled_dot_product_attention, q, k, v, {"attn_mask": mask}, 0))
    out, grads = _grads(
        lambda *a, **kw: T.scaled_dot_product_attention(*a, **kw, backend=backend), q, k, v, {"attn_mask": mask}, 0
    )
    assert torch.equal(out[:, :, 1], torch.zeros(2, 3, 8)) and torch.equal(grads[0][:, :, 1], torch.zeros(2, 3, 8))
    for want, want_grads in results:
        torch.testing.assert_close(out, want)
        for a, b in zip(grads, want_grads, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("q_len,k_len", [(3, 6), (6, 3)])
def test_is_causal_is_top_left_aligned_as_torch(backend, q_len, k_len):
    q, k, v = torch.randn(1, 2, q_len, 8), torch.randn(1, 2, k_len, 8), torch.randn(1, 2, k_len, 8)
    out = T.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend)
    top_left = torch.ones(q_len, k_len, dtype=torch.bool).tril()  # query i sees keys 0..i
    torch.testing.assert_close(out, _torch_math(q, k, v, attn_mask=top_left))
    bottom_right = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    assert not torch.allclose(out, _torch_math(q, k, v, attn_mask=bottom_right))


# ---------------------------------------------------------------------------- inputs torch refuses
def _refused():
    """(id, args, kwargs, exception type, what our message must name); torch (math backend) refuses each."""
    r = torch.randn
    q, k, v = r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8)
    return [
        ("query-not-a-tensor", ([[1.0]], k, v), {}, TypeError, "'query'"),
        ("dtypes-differ", (q, k.double(), v), {}, RuntimeError, "key.dtype: torch.float64"),
        ("devices-differ", (q, k.to("meta"), v), {}, RuntimeError, "key.device: meta"),
        ("query-1-d", (r(8), k, v), {}, RuntimeError, "query.dim: 1"),
        ("integer-inputs", (q.long(), k.long(), v.long()), {}, RuntimeError, "floating point.*torch.int64"),
        (
            "mask-integer",
            (q, k, v),
            {"attn_mask": torch.ones(4, 5, dtype=torch.long)},
            RuntimeError,
            "attn_mask.dtype: torch.int64",
        ),
        (
            "mask-float64-for-float32",
            (q, k, v),
            {"attn_mask": torch.zeros(4, 5, dtype=torch.float64)},
            RuntimeError,
            "attn_mask.dtype: torch.float64",
        ),
        (
            "mask-wrong-k-len",
            (q, k, v),
            {"attn_mask": torch.ones(4, 6, dtype=torch.bool)},
            RuntimeError,
            r"attn_mask of shape \[4, 6\]",
        ),
        (
            "mask-larger-than-weights",
            (r(1, 3, 4, 8), r(1, 3, 5, 8), r(1, 3, 5, 8)),
            {"attn_mask": torch.ones(2, 1, 4, 5, dtype=torch.bool)},
            RuntimeError,
            r"attn_mask of shape \[2, 1, 4, 5\]",
        ),
        (
            "mask-with-more-dims-than-weights",
            (q, k, v),
            {"attn_mask": torch.ones(1, 1, 1, 4, 5, dtype=torch.bool)},
            RuntimeError,
            r"attn_mask of shape \[1, 1, 1, 4, 5\]",
        ),
        (
            "mask-and-is-causal",
            (q, k, v),
            {"attn_mask": torch.ones(4, 5, dtype=torch.bool), "is_causal": True},
            RuntimeError,
            "attn_mask should not be set when is_causal=True",
        ),
        ("head-dims-differ", (q, r(2, 3, 5, 6), v), {}, RuntimeError, r"key's last dim \(E=6\)"),
        ("value-length-differs", (q, k, r(2, 3, 6, 8)), {}, RuntimeError, "value must have key's length S=5"),
        (
            "heads-without-enable-gqa",
            (r(2, 4, 4, 8), r(2, 2, 5, 8), r(2, 2, 5, 8)),
            {},
            RuntimeError,
            r"query \[2, 4, 4, 8\], key \[2, 2, 5, 8\].*do not broadcast",
        ),
        (
            "gqa-heads-do-not-divide",
            (r(2, 4, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 8)),
            {"enable_gqa": True},
            RuntimeError,
            "query has 4, key 3, value 3",
        ),
        ("gqa-2-d", (r(4, 8), r(5, 8), r(5, 8)), {"enable_gqa": True}, IndexError, "got -3"),
        (
            "batch-does-not-broadcast",
            (r(2, 3, 4, 8), r(3, 3, 5, 8), r(3, 3, 5, 8)),
            {},
            RuntimeError,
            "do not broadcast",
        ),
        ("dropout-above-one", (q, k, v), {"dropout_p": 1.5}, RuntimeError, "dropout probability.*1.5"),
        ("dropout-a-string", (q, k, v), {"dropout_p": "0.1"}, TypeError, "'dropout_p' must be float"),
        ("is-causal-an-int", (q, k, v), {"is_causal": 1}, TypeError, "'is_causal' must be bool"),
        ("scale-a-string", (q, k, v), {"scale": "a"}, TypeError, "'scale' must be float"),
        ("enable-gqa-an-int", (q, k, v), {"enable_gqa": 1}, TypeError, "'enable_gqa' must be bool"),
    ]


@pytest.mark.parametrize("case", _refused(), ids=lambda c: c[0])
def test_inputs_torch_refuses_are_refused_with_torchs_exception_type(case):
    _, args, kwargs, error, names = case
    with pytest.raises(error):
        _torch_math(*args, **kwargs)
    for backend in ("auto", "eager", "torch", "triton"):  # checked before any backend runs
        with pytest.raises(error, match=names):
            T.scaled_dot_product_attention(*args, **kwargs, backend=backend)


def test_low_rank_masks_broadcast_on_every_backend_as_in_torchs_definition():
    """torch's math backend broadcasts a (S,) mask; its fused CPU path raises IndexError: ours follows the math."""
    q, k, v = torch.randn(2, 3, 4, 16), torch.randn(2, 3, 5, 16), torch.randn(2, 3, 5, 16)
    mask = torch.tensor([True, False, True, True, False])
    want = _torch_math(q, k, v, attn_mask=mask)
    for backend in CPU_BACKENDS + ["triton"]:
        torch.testing.assert_close(
            T.scaled_dot_product_attention(q, k, v, mask, backend=backend), want, atol=1e-5, rtol=1e-5
        )
    rows = torch.rand(4, 1) > 0.5  # a (L, 1) mask: one flag per query row
    per_head = torch.rand(3, 4, 5) > 0.3  # a (heads, L, S) mask
    for mask in (rows, per_head):
        torch.testing.assert_close(
            T.scaled_dot_product_attention(q, k, v, mask, backend="triton"),
            _torch_math(q, k, v, attn_mask=mask),
            atol=1e-5,
            rtol=1e-5,
        )


# ---------------------------------------------------------------------------- the extras
@pytest.mark.parametrize("backend", CPU_BACKENDS + ["triton"])
def test_an_attention_mask_gives_what_its_dense_form_gives(backend):
    q, k, v = torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    structured = T.AttentionMask(causal=True, key_lengths=torch.tensor([3, 5]), query_lengths=torch.tensor([2, 5]))
    out = T.scaled_dot_product_attention(q, k, v, structured, backend=backend)
    dense = structured.to_dense(5, 5).unsqueeze(1)
    torch.testing.assert_close(out, _torch_math(q, k, v, attn_mask=dense), atol=1e-5, rtol=1e-5)
    assert torch.equal(out[0, :, 2:], torch.zeros(2, 3, 16))  # padded query rows output 0


def test_an_attention_mask_needs_4d_inputs_and_no_is_causal():
    q = torch.randn(2, 5, 16)
    with pytest.raises(RuntimeError, match="an AttentionMask needs 4-D"):
        T.scaled_dot_product_attention(q, q, q, T.AttentionMask(causal=True))
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(RuntimeError, match="should not be set when is_causal=True"):
        T.scaled_dot_product_attention(q, q, q, T.AttentionMask(key_lengths=torch.tensor([3])), is_causal=True)
    with pytest.raises(T.TypeCheckError, match="mask.key_lengths"):
        T.scaled_dot_product_attention(q, q, q, T.AttentionMask(key_lengths=torch.tensor([3, 4])))


def test_a_named_backend_never_falls_back_and_says_why():
    q, k, v = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    additive = torch.zeros(4, 5)
    with pytest.raises(ValueError, match="attention backend 'triton' cannot run these inputs: mask must be a bool"):
        T.scaled_dot_product_attention(q, k, v, additive, backend="triton")
    with pytest.raises(ValueError, match="dropout_p must be a float in"):
        T.scaled_dot_product_attention(q, k, v, dropout_p=1.0, backend="triton")
    with pytest.raises(ValueError, match="attention backend must be one of"):
        T.scaled_dot_product_attention(q, k, v, backend="flash")


def test_the_choice_and_its_reason_are_logged_at_debug_level(caplog):
    q, k, v = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    with caplog.at_level(logging.DEBUG, logger="transformer.sdpa"):
        T.scaled_dot_product_attention(q, k, v)
        T.scaled_dot_product_attention(q.double(), k.double(), v.double())
        T.scaled_dot_product_attention(q, k, v, backend="triton")
    lines = [r.getMessage() for r in caplog.records if r.name == "transformer.sdpa"]
    assert lines == [
        "scaled_dot_product_attention runs on torch: cpu tensors: auto runs the kernel on CUDA only",
        "scaled_dot_product_attention runs on eager: float64: only the reference supports every autograd mode",
        "scaled_dot_product_attention runs on triton: asked for by name ('triton')",
    ]


def test_a_use_backend_block_chooses_when_no_backend_is_named(caplog):
    q = torch.randn(1, 2, 4, 16)
    with caplog.at_level(logging.DEBUG, logger="transformer.sdpa"), T.use_backend("eager"):
        T.scaled_dot_product_attention(q, q, q)
        T.scaled_dot_product_attention(q, q, q, backend="torch")  # the argument beats the block
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.name == "transformer.sdpa"] == [
        "scaled_dot_product_attention runs on eager",
        "scaled_dot_product_attention runs on torch",
    ]


def test_why_auto_on_cuda_falls_back_names_the_kernels_reason(monkeypatch):
    fake_cuda = type("FakeCuda", (), {"is_cuda": True, "dtype": torch.float16})()
    monkeypatch.setattr(sdpa_module, "triton_unsupported_reason", lambda *a: "mask must be a bool tensor")
    assert (
        sdpa_module._why("auto", "torch", fake_cuda, None, None, None, 0.0, None)
        == "the kernel does not take these inputs: mask must be a bool tensor"
    )
    assert sdpa_module._why("auto", "triton", fake_cuda, None, None, None, 0.0, None) == "the kernel takes these inputs"


def test_the_kernel_gets_grouped_key_value_heads_in_place(monkeypatch):
    """GQA reaches the kernel with kv_heads heads (no repeated copy), whatever the kernel then supports."""
    seen = []

    def flash(q, k, v, **kwargs):
        seen.append((tuple(q.shape), tuple(k.shape), tuple(v.shape)))
        return sdpa_module.reference(q, k, v, enable_gqa=True)

    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a: None)
    monkeypatch.setattr(kernels, "flash_attention", flash)
    q, k, v = torch.randn(2, 8, 4, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    out = T.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="triton")
    assert seen == [((2, 8, 4, 16), (2, 2, 5, 16), (2, 2, 5, 16))]
    torch.testing.assert_close(out, _torch_math(q, k, v, enable_gqa=True))


def test_torch_without_enable_gqa_gets_repeated_heads(monkeypatch):
    """torch < 2.5 has no enable_gqa: the torch backend repeats the key/value heads for it."""
    calls = []
    real = F.scaled_dot_product_attention

    def old_torch(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        calls.append(k.shape)
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)

    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    want = _torch_math(q, k, v, enable_gqa=True)
    monkeypatch.setattr(torch_backend_module, "_TORCH_HAS_GQA", False)
    monkeypatch.setattr(torch_backend_module, "_TORCH_SDPA", old_torch)
    out = T.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="torch")
    assert calls == [torch.Size([2, 4, 5, 8])]
    torch.testing.assert_close(out, want)


# ---------------------------------------------------------------------------- dropout
@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_dropout_keeps_one_minus_p_and_scales_by_its_inverse(backend):
    """With equal scores every probability is 1/S; values = the identity make the output the dropped
    probabilities themselves: each entry is 0 or 1/(S (1-p)), about a fraction 1-p of them nonzero. The gradient
    of the values is the same dropped matrix transposed (the backward uses the forward's mask)."""
    p, s = 0.3, 16
    rows = 32 if backend == "triton" else 256
    q, k = torch.zeros(1, 2, rows, s), torch.randn(1, 2, s, s)
    v = torch.eye(s).expand(1, 2, s, s).clone().requires_grad_(True)
    torch.manual_seed(5)
    out = T.scaled_dot_product_attention(q, k, v, dropout_p=p, backend=backend)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < (0.06 if backend == "triton" else 0.02)
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (s * (1 - p))))
    g = torch.randn_like(out)
    out.backward(g)
    torch.testing.assert_close(v.grad, out.detach().transpose(-2, -1) @ g, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------- the kernel (TRITON_INTERPRET=1)
def _kernel_cases():
    """Small: the interpreter is slow. (id, q, k, v, kwargs)."""
    g = torch.Generator().manual_seed(7)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    mask = torch.rand(2, 1, 6, 9, generator=g) > 0.3
    mask[:, :, 2] = False
    return [
        ("4d-bool-mask-empty-row", r(2, 2, 6, 16), r(2, 2, 9, 16), r(2, 2, 9, 16), {"attn_mask": mask}),
        ("2d-causal-q-longer", r(9, 16), r(5, 16), r(5, 16), {"is_causal": True}),
        ("3d-broadcast-causal-k-longer", r(3, 5, 16), r(1, 9, 16), r(3, 9, 16), {"is_causal": True, "scale": 0.3}),
        (
            "5d-broadcast-mask",
            r(2, 2, 2, 4, 16),
            r(1, 2, 2, 6, 16),
            r(2, 1, 2, 6, 16),
            {"attn_mask": torch.rand(2, 1, 1, 4, 6, generator=g) > 0.2},
        ),
    ]


_HALF_CASES = ("4d-bool-mask-empty-row", "3d-broadcast-causal-k-longer")  # float16 on two: the interpreter is slow
_KERNEL_RUNS = [(case, torch.float32) for case in _kernel_cases()] + [
    (case, torch.float16) for case in _kernel_cases() if case[0] in _HALF_CASES
]


@pytest.mark.parametrize("case,dtype", _KERNEL_RUNS, ids=lambda c: c[0] if isinstance(c, tuple) else str(c)[6:])
def test_the_kernel_path_meets_the_flash_attention_error_rule(case, dtype):
    """Low precision judged against float64: at most twice the error of torch's own function in the same dtype
    (plus a small floor), for the output and every gradient."""
    _, q, k, v, kwargs = case
    exact = _grads(_torch_math, q.double(), k.double(), v.double(), kwargs, 1)
    torchs = _grads(F.scaled_dot_product_attention, q.to(dtype), k.to(dtype), v.to(dtype), kwargs, 1)
    ours = _grads(
        lambda *a, **kw: T.scaled_dot_product_attention(*a, **kw, backend="triton"),
        q.to(dtype),
        k.to(dtype),
        v.to(dtype),
        kwargs,
        1,
    )
    floor = 1e-5 if dtype == torch.float32 else 1e-3
    for name, mine, theirs, ref in zip(
        ("out", "dq", "dk", "dv"), (ours[0], *ours[1]), (torchs[0], *torchs[1]), (exact[0], *exact[1]), strict=True
    ):
        assert mine.shape == ref.shape and mine.dtype == dtype
        err, torch_err = (mine.double() - ref).abs().max().item(), (theirs.double() - ref).abs().max().item()
        assert err <= 2 * torch_err + floor * max(1.0, ref.abs().max().item()), (name, err, torch_err)


def test_the_kernel_path_on_grouped_heads_matches_torch_or_names_the_kernels_limit():
    """enable_gqa on the kernel: equal to torch's function where the kernel reads shared heads, else refused by
    name with the kernel's own reason (never another answer)."""
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    reason = kernels.unsupported_reason(q, k, v)
    if reason is None:
        out = T.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="triton")
        torch.testing.assert_close(out, _torch_math(q, k, v, enable_gqa=True), atol=1e-5, rtol=1e-5)
    else:
        with pytest.raises(ValueError, match="attention backend 'triton' cannot run these inputs: k heads"):
            T.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend="triton")
        assert torch.equal(
            T.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        )


@pytest.mark.parametrize("debug", [False, True], ids=["quiet", "debug-logging"])
def test_the_drop_in_compiles_in_one_graph_and_gives_torchs_answer(debug, caplog):
    """Inside a user's model compiled with ``fullgraph=True`` the drop-in must not break the graph (a Logger call
    while tracing is one), with DEBUG logging on or off, and must give torch's answer."""

    def attend(q, k, v):
        return T.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    torch._dynamo.reset()
    with caplog.at_level(logging.DEBUG if debug else logging.WARNING, logger="transformer.sdpa"):
        out = torch.compile(attend, fullgraph=True, backend="eager")(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
